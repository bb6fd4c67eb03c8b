//! Turning a caught panic into text for the error it becomes (a panic in a task is a bug, but it
//! must end one trial's work, never the process or a sibling).

/// The text of a panic's payload.
pub fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string())
}
