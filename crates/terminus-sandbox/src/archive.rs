//! Tar archives for the engine's copy endpoints: directories packed for upload, and downloaded
//! archives unpacked into a trial directory.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Packs `dir` recursively; entries are placed under `prefix` (empty for the archive root).
/// File modes are kept, so scripts stay executable inside the container. Links inside `dir` are
/// packed as links; a link leading outside it, or a special file, is an error naming the path
/// (see `terminus_core::tree`), so nothing from outside the task reaches a container or image.
pub fn tar_dir(dir: &Path, prefix: &str) -> std::io::Result<Vec<u8>> {
    use terminus_core::tree::{TreeEntry, walk};
    let entries = walk(dir).map_err(std::io::Error::other)?;
    let mut builder = tar::Builder::new(Vec::new());
    let base = if prefix.is_empty() { PathBuf::from(".") } else { PathBuf::from(prefix) };
    let mut root = tar::Header::new_gnu();
    root.set_entry_type(tar::EntryType::Directory);
    root.set_mode(0o755);
    root.set_size(0);
    builder.append_data(&mut root, &base, std::io::empty())?;
    for entry in entries {
        let name = base.join(entry.rel());
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        match entry {
            TreeEntry::Dir { mode, .. } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(mode);
                header.set_size(0);
                builder.append_data(&mut header, &name, std::io::empty())?;
            }
            TreeEntry::File { path, mode, size, .. } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(mode);
                header.set_size(size);
                let file = std::fs::File::open(&path)?;
                builder.append_data(&mut header, &name, file.take(size))?;
            }
            TreeEntry::Link { target, .. } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, &name, &target)?;
            }
        }
    }
    builder.into_inner()
}

/// An archive holding only directories (mode 0777, so any in-container user can write them) and
/// the given files.
pub fn tar_dirs_and_files(dirs: &[&str], files: &[(&str, &[u8], u32)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for dir in dirs {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o777);
        header.set_size(0);
        header.set_mtime(0);
        builder.append_data(&mut header, format!("{}/", dir.trim_end_matches('/')), std::io::empty())?;
    }
    for (path, contents, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(*mode);
        header.set_size(contents.len() as u64);
        header.set_mtime(0);
        builder.append_data(&mut header, path, *contents)?;
    }
    builder.into_inner()
}

/// Unpacks a downloaded archive into `dest`, dropping the first path component (the engine names
/// it after the requested directory). Entries that would escape `dest` are skipped, and existing
/// files are kept when `keep_existing` is set (files the host already wrote win).
pub fn unpack_stripped(archive: &[u8], dest: &Path, keep_existing: bool) -> std::io::Result<usize> {
    let mut reader = tar::Archive::new(archive);
    let mut n_files = 0;
    for entry in reader.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Some(rel) = strip_first(&path) else {
            continue;
        };
        if write_entry(&mut entry, &dest.join(&rel), keep_existing)? {
            n_files += 1;
        }
    }
    Ok(n_files)
}

/// Writes one archive entry at `target`: directories are created, regular files written (unless
/// `keep_existing` and the file is there); returns whether a file was written. Links and devices
/// from inside a container have no business on the host and are skipped.
fn write_entry(entry: &mut tar::Entry<'_, &[u8]>, target: &Path, keep_existing: bool) -> std::io::Result<bool> {
    match entry.header().entry_type() {
        tar::EntryType::Directory => std::fs::create_dir_all(target)?,
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            if keep_existing && target.exists() {
                return Ok(false);
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            std::fs::write(target, bytes)?;
            return Ok(true);
        }
        _ => {}
    }
    Ok(false)
}

/// Unpacks a downloaded archive so that its top entry becomes `dest`: a file lands at `dest`, a
/// directory's contents under `dest/`. Returns the number of files written.
pub fn unpack_renamed(archive: &[u8], dest: &Path) -> std::io::Result<usize> {
    let mut reader = tar::Archive::new(archive);
    let mut n_files = 0;
    for entry in reader.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let target = match strip_first(&path) {
            Some(rest) => dest.join(rest),
            // The top entry itself: the file, or the directory.
            None if path.components().count() == 1 => dest.to_path_buf(),
            None => continue,
        };
        match entry.header().entry_type() {
            tar::EntryType::Directory => std::fs::create_dir_all(&target)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes)?;
                std::fs::write(&target, bytes)?;
                n_files += 1;
            }
            _ => {}
        }
    }
    Ok(n_files)
}

/// Unpacks an archive of a directory whose subdirectories go to different places: the entry
/// `top/<name>/rest` lands at `<dest of name>/rest` for each route `(name, dest, keep_existing)`;
/// other entries are skipped.
pub fn unpack_routed(archive: &[u8], routes: &[(&str, &Path, bool)]) -> std::io::Result<usize> {
    let mut reader = tar::Archive::new(archive);
    let mut n_files = 0;
    for entry in reader.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Some(rel) = strip_first(&path) else { continue };
        let mut parts = rel.components();
        let Some(first) = parts.next() else { continue };
        let rest: PathBuf = parts.collect();
        let Some((_, dest, keep)) = routes.iter().find(|(name, _, _)| first.as_os_str() == *name) else { continue };
        // A file named like a route (not a directory) has nowhere to go.
        if rest.as_os_str().is_empty() && entry.header().entry_type() != tar::EntryType::Directory {
            continue;
        }
        if write_entry(&mut entry, &dest.join(&rest), *keep)? {
            n_files += 1;
        }
    }
    Ok(n_files)
}

fn strip_first(path: &Path) -> Option<PathBuf> {
    let mut components = path.components();
    components.next()?;
    let rest: PathBuf = components.collect();
    if rest.as_os_str().is_empty() || rest.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_strips_the_top_directory() {
        let tmp = std::env::temp_dir().join(format!("terminus-archive-{}", std::process::id()));
        let src = tmp.join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a.txt"), "A").unwrap();
        let archive = tar_dir(&src, "logs").unwrap();
        let dest = tmp.join("dest");
        assert_eq!(unpack_stripped(&archive, &dest, false).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(), "A");
        std::fs::write(dest.join("sub/a.txt"), "host").unwrap();
        unpack_stripped(&archive, &dest, true).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(), "host");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn routed_unpacking_sends_each_subdirectory_to_its_place() {
        let tmp = std::env::temp_dir().join(format!("terminus-routes-{}", std::process::id()));
        let src = tmp.join("logs");
        std::fs::create_dir_all(src.join("agent")).unwrap();
        std::fs::create_dir_all(src.join("verifier")).unwrap();
        std::fs::create_dir_all(src.join("other")).unwrap();
        std::fs::write(src.join("agent/pane"), "P").unwrap();
        std::fs::write(src.join("verifier/reward.txt"), "1").unwrap();
        std::fs::write(src.join("other/x"), "X").unwrap();
        let archive = tar_dir(&src, "logs").unwrap();
        let (agent, verifier) = (tmp.join("a"), tmp.join("v"));
        let n = unpack_routed(&archive, &[("agent", agent.as_path(), true), ("verifier", verifier.as_path(), false)])
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(std::fs::read_to_string(agent.join("pane")).unwrap(), "P");
        assert_eq!(std::fs::read_to_string(verifier.join("reward.txt")).unwrap(), "1");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn escaping_paths_are_skipped() {
        assert_eq!(strip_first(Path::new("logs/../../etc/passwd")), None);
        assert_eq!(strip_first(Path::new("logs")), None);
        assert_eq!(strip_first(Path::new("logs/a/b")), Some(PathBuf::from("a/b")));
    }
}
