//! Walking a task's directory safely. Task directories come from users and from the internet;
//! what they hold goes into images, hashes and uploads, so the walk refuses what could reach
//! outside the task or never end:
//! - a symbolic link whose target resolves outside the root (a link to `~/.ssh/id_ed25519`
//!   would put a host key into the image; one to `/dev/zero` would be read forever) or does not
//!   resolve at all;
//! - anything that is not a directory, a regular file or such a link (fifos, sockets, devices);
//! - more than [`MAX_ENTRIES`] entries.
//!
//! Links that stay inside are kept as links, never followed, so two links to `.` cannot make the
//! walk loop. Every refusal names the path.

use std::path::{Path, PathBuf};

/// The most entries one task directory may hold.
pub const MAX_ENTRIES: usize = 100_000;

/// One entry, by its path relative to the root (`/`-separated on every platform we run on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeEntry {
    Dir {
        rel: PathBuf,
        mode: u32,
    },
    File {
        rel: PathBuf,
        path: PathBuf,
        mode: u32,
        size: u64,
    },
    /// A link that resolves inside the root; `target` as written.
    Link {
        rel: PathBuf,
        target: PathBuf,
    },
}

impl TreeEntry {
    pub fn rel(&self) -> &Path {
        match self {
            TreeEntry::Dir { rel, .. } | TreeEntry::File { rel, .. } | TreeEntry::Link { rel, .. } => rel,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("`{}` is a link to `{}`, outside the task directory", .path.display(), .target.display())]
    Escapes { path: PathBuf, target: PathBuf },
    #[error("`{}` is a link that does not resolve", .path.display())]
    Dangling { path: PathBuf },
    #[error("`{}` is a {kind}, not a file or a directory", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("`{}` holds more than {limit} entries", .root.display())]
    TooMany { root: PathBuf, limit: usize },
    #[error("cannot read `{}`: {source}", .path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{}` is larger than {} KiB", .path.display(), .limit / 1024)]
    TooLarge { path: PathBuf, limit: u64 },
}

#[cfg(unix)]
fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode_of(_meta: &std::fs::Metadata) -> u32 {
    0o644
}

#[cfg(unix)]
fn special_kind(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "fifo"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "device"
    } else {
        "special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_file_type: &std::fs::FileType) -> &'static str {
    "special file"
}

/// Every entry below `root`, sorted by relative path (so equal trees list equally anywhere).
pub fn walk(root: &Path) -> Result<Vec<TreeEntry>, TreeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TreeError::Io { path, source }
    };
    let canonical_root = root.canonicalize().map_err(io(root))?;
    let mut out = Vec::new();
    // An explicit stack: the depth of a hostile tree cannot overflow ours.
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            let file_type = meta.file_type();
            let item = if file_type.is_dir() {
                stack.push(path.clone());
                TreeEntry::Dir { rel, mode: mode_of(&meta) }
            } else if file_type.is_file() {
                TreeEntry::File { rel, path: path.clone(), mode: mode_of(&meta), size: meta.len() }
            } else if file_type.is_symlink() {
                let target = std::fs::read_link(&path).map_err(io(&path))?;
                let resolved = path.canonicalize().map_err(|_| TreeError::Dangling { path: path.clone() })?;
                if !resolved.starts_with(&canonical_root) {
                    return Err(TreeError::Escapes { path, target: resolved });
                }
                TreeEntry::Link { rel, target }
            } else {
                return Err(TreeError::NotRegular { path, kind: special_kind(&file_type) });
            };
            out.push(item);
            if out.len() > MAX_ENTRIES {
                return Err(TreeError::TooMany { root: root.to_path_buf(), limit: MAX_ENTRIES });
            }
        }
    }
    out.sort_by(|a, b| a.rel().cmp(b.rel()));
    Ok(out)
}

/// Reads one file of a task as text, checked before a byte is read: a link must resolve inside
/// `root`, the file must be a regular one (not a fifo, which would block, nor a device, which
/// may never end), and at most `limit` bytes long.
pub fn read_text(root: &Path, rel: &str, limit: u64) -> Result<String, TreeError> {
    use std::io::Read;
    let path = root.join(rel);
    let io = |source| TreeError::Io { path: path.clone(), source };
    let link = std::fs::symlink_metadata(&path).map_err(io)?;
    if link.file_type().is_symlink() {
        let canonical_root = root.canonicalize().map_err(io)?;
        let resolved = path.canonicalize().map_err(|_| TreeError::Dangling { path: path.clone() })?;
        if !resolved.starts_with(&canonical_root) {
            return Err(TreeError::Escapes { path: path.clone(), target: resolved });
        }
    }
    let meta = std::fs::metadata(&path).map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(TreeError::NotRegular { path: path.clone(), kind: special_kind(&meta.file_type()) });
    }
    if meta.len() > limit {
        return Err(TreeError::TooLarge { path: path.clone(), limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow between the check and the read: never more than the limit.
    std::fs::File::open(&path).map_err(io)?.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(TreeError::TooLarge { path: path.clone(), limit });
    }
    String::from_utf8(bytes).map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

#[cfg(all(test, unix))]
#[expect(clippy::disallowed_methods, reason = "the tests make a named pipe with mkfifo(1)")]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn links_inside_are_kept_and_links_outside_or_special_files_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("task");
        std::fs::create_dir_all(root.join("environment/sub")).unwrap();
        std::fs::write(root.join("environment/Dockerfile"), "FROM x\n").unwrap();
        symlink("Dockerfile", root.join("environment/alias")).unwrap();
        // Two links to `.`: kept as links, not followed, so the walk ends.
        symlink(".", root.join("environment/self")).unwrap();
        symlink("..", root.join("environment/sub/up")).unwrap();
        let entries = walk(&root).unwrap();
        let rels: Vec<String> = entries.iter().map(|e| e.rel().display().to_string()).collect();
        assert_eq!(
            rels,
            [
                "environment",
                "environment/Dockerfile",
                "environment/alias",
                "environment/self",
                "environment/sub",
                "environment/sub/up"
            ]
        );

        std::fs::write(dir.path().join("id_ed25519"), "PRIVATE").unwrap();
        symlink(dir.path().join("id_ed25519"), root.join("environment/key")).unwrap();
        let err = walk(&root).unwrap_err();
        assert!(matches!(err, TreeError::Escapes { .. }), "{err}");
        assert!(err.to_string().contains("environment/key"), "{err}");
        std::fs::remove_file(root.join("environment/key")).unwrap();

        symlink("/dev/zero", root.join("zero")).unwrap();
        assert!(matches!(walk(&root).unwrap_err(), TreeError::Escapes { .. }));
        std::fs::remove_file(root.join("zero")).unwrap();

        symlink("nowhere", root.join("dangling")).unwrap();
        assert!(matches!(walk(&root).unwrap_err(), TreeError::Dangling { .. }));
        std::fs::remove_file(root.join("dangling")).unwrap();

        let fifo = root.join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = walk(&root).unwrap_err();
        assert!(matches!(err, TreeError::NotRegular { kind: "fifo", .. }), "{err}");
    }

    #[test]
    fn a_task_file_is_checked_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("task");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("task.toml"), "version = \"1.0\"\n").unwrap();
        assert_eq!(read_text(&root, "task.toml", 1024).unwrap(), "version = \"1.0\"\n");
        symlink("task.toml", root.join("alias.toml")).unwrap();
        assert!(read_text(&root, "alias.toml", 1024).is_ok(), "a link inside is followed");
        symlink("/dev/zero", root.join("zero.toml")).unwrap();
        assert!(matches!(read_text(&root, "zero.toml", 1024).unwrap_err(), TreeError::Escapes { .. }));
        std::fs::write(root.join("big.md"), vec![b'x'; 2048]).unwrap();
        assert!(matches!(read_text(&root, "big.md", 1024).unwrap_err(), TreeError::TooLarge { .. }));
        let fifo = root.join("pipe.toml");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(matches!(read_text(&root, "pipe.toml", 1024).unwrap_err(), TreeError::NotRegular { kind: "fifo", .. }));
    }
}
