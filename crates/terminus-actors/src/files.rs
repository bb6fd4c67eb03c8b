//! Writing result files so that a crash never leaves a half-written one: write a temporary file,
//! flush it to disk, then rename it over the target.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

/// Writes `bytes` to `path` atomically: after a crash the file holds the old content or the new
/// one, whole. The directory is flushed after the rename too, or the rename itself could be lost.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_via_temp(path, bytes, true)
}

/// Replaces `path` with `bytes` through a temporary file and a rename, without flushing to disk:
/// a reader never sees half a file, but a power cut may keep the old one. For files rewritten
/// often whose last version is written with [`write_atomic`] (a trial's trajectory after each
/// episode: a trial cut short is run again anyway).
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_via_temp(path, bytes, false)
}

/// A file of the container's making, read whole only when it is at most `limit` bytes: its
/// text, or `Err(Ok(size))` when it is larger (nothing of it is read), or the read's error.
pub fn read_capped(path: &Path, limit: u64) -> Result<String, Result<u64, std::io::Error>> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(Err)?;
    if !meta.is_file() {
        return Err(Err(std::io::Error::other("not a regular file")));
    }
    if meta.len() > limit {
        return Err(Ok(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path).and_then(|f| f.take(limit + 1).read_to_end(&mut bytes)).map_err(Err)?;
    if bytes.len() as u64 > limit {
        return Err(Ok(bytes.len() as u64));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// What names a temporary file of [`write_via_temp`]: `<stem>.tmp-<pid>`.
const TEMP_MARK: &str = "tmp-";

/// Whether `path` is a temporary file a write through a rename left behind.
pub fn is_temporary(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .and_then(|e| e.strip_prefix(TEMP_MARK))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn write_via_temp(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let tmp = path.with_extension(format!("{TEMP_MARK}{}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        if sync { file.sync_all() } else { Ok(()) }
    });
    // A full disk leaves no half-written temporary file behind.
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if sync { std::fs::File::open(parent)?.sync_all() } else { Ok(()) }
}

/// JSON with four-space indentation (Harbor's result files use `indent=4`).
pub fn to_json<T: Serialize>(value: &T) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    value.serialize(&mut serializer).map_err(std::io::Error::other)?;
    Ok(out)
}

/// Writes JSON with four-space indentation, atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    write_atomic(path, &to_json(value)?)
}

/// Writes a text file (episode prompts and responses); failures are logged, never fatal.
pub fn write_text_logged(path: &Path, text: &str) {
    let res = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(path, text));
    if let Err(e) = res {
        tracing::warn!(path = %path.display(), error = %e, "could not write a log file");
    }
}

/// Whether an error says the disk (or the user's quota) is full.
pub fn is_disk_full(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

/// `word` quoted for a shell command line.
pub fn shell_word(word: &str) -> String {
    terminus_sandbox::tmux::shell_quote(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_the_file() {
        let dir = std::env::temp_dir().join(format!("terminus-files-{}", std::process::id()));
        let path = dir.join("a/result.json");
        write_json(&path, &serde_json::json!({"x": 1})).unwrap();
        write_json(&path, &serde_json::json!({"x": 2})).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\n    \"x\": 2\n}");
        assert_eq!(std::fs::read_dir(dir.join("a")).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
