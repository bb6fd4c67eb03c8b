//! File work off the async workers.

/// Runs file work (walking, hashing, packing, unpacking) on the blocking pool, off the async
/// workers — two of them on a two-core machine, which a large task would otherwise stall for
/// every trial. A panic in `work` resumes in the caller.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("file work was cancelled: {e}"),
        },
    }
}
