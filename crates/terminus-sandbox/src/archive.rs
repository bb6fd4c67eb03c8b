//! Tar archives for the engine's copy endpoints: directories packed for upload, and downloaded
//! archives unpacked into a trial directory.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Packs `dir` recursively; entries are placed under `prefix` (empty for the archive root).
/// File modes are kept, so scripts stay executable inside the container. Links inside `dir` are
/// packed as links; a link leading outside it, or a special file, is an error naming the path
/// (see `terminus_core::tree`), so nothing from outside the task reaches a container or image.
pub fn tar_dir(dir: &Path, prefix: &str) -> std::io::Result<Vec<u8>> {
    pack_dir(dir, prefix, true)
}

/// Packs what `dir` holds, without an entry for `dir` itself: unpacked into a directory that
/// exists (a working directory), it adds files and leaves that directory's owner and mode alone.
pub fn tar_dir_contents(dir: &Path) -> std::io::Result<Vec<u8>> {
    pack_dir(dir, "", false)
}

fn pack_dir(dir: &Path, prefix: &str, with_root: bool) -> std::io::Result<Vec<u8>> {
    use terminus_core::tree::{TreeEntry, walk};
    let entries = walk(dir).map_err(std::io::Error::other)?;
    let mut builder = tar::Builder::new(Vec::new());
    let base = if prefix.is_empty() { PathBuf::from(".") } else { PathBuf::from(prefix) };
    if with_root {
        let mut root = tar::Header::new_gnu();
        root.set_entry_type(tar::EntryType::Directory);
        root.set_mode(0o755);
        root.set_size(0);
        builder.append_data(&mut root, &base, std::io::empty())?;
    }
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

/// Packs `path` — a directory ([`tar_dir`]) or a regular file (streamed) — as the entry `name`
/// (a path relative to where the archive is unpacked; the engine makes missing parents).
pub fn tar_path(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        return tar_dir(path, name);
    }
    if !meta.is_file() {
        return Err(std::io::Error::other(format!("`{}` is not a file or a directory", path.display())));
    }
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    #[cfg(unix)]
    header.set_mode(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777);
    #[cfg(not(unix))]
    header.set_mode(0o644);
    header.set_size(meta.len());
    header.set_mtime(0);
    let file = std::fs::File::open(path)?;
    builder.append_data(&mut header, name, file.take(meta.len()))?;
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

/// How much of a downloaded archive may reach the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    pub max_files: usize,
    pub max_bytes: u64,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits { max_files: 20_000, max_bytes: 1024 * 1024 * 1024 }
    }
}

/// What an unpacking wrote, and what it left out (said in the trial's result).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    pub files: usize,
    pub bytes: u64,
    /// Why it stopped early, if it did.
    pub cut: Option<String>,
    /// Top-level names left out because the host reserves them (each once, in archive order).
    pub reserved: Vec<String>,
}

/// The state of one unpacking against its limits.
struct Budget {
    limits: UnpackLimits,
    done: Unpacked,
}

impl Budget {
    fn new(limits: UnpackLimits) -> Budget {
        Budget { limits, done: Unpacked::default() }
    }

    /// How much of one more file of `size` bytes may be written: all of it, its head up to the
    /// byte limit (noting the cut), or nothing once the file count is reached (noting that).
    fn room(&mut self, size: u64) -> Option<u64> {
        if self.done.files >= self.limits.max_files {
            self.done.cut = Some(format!("more than {} files", self.limits.max_files));
            return None;
        }
        let left = self.limits.max_bytes.saturating_sub(self.done.bytes);
        if size > left {
            self.done.cut = Some(format!("more than {} MiB", self.limits.max_bytes / (1024 * 1024)));
        }
        Some(size.min(left))
    }

    fn wrote(&mut self, size: u64) {
        self.done.files += 1;
        self.done.bytes += size;
    }

    /// An archive that ends early (a download cut at its size limit) keeps what came before.
    fn broken(&mut self, e: &std::io::Error) {
        self.done.cut.get_or_insert_with(|| format!("the archive ends early ({e})"));
    }
}

/// Writes one archive entry at `target`, streaming: directories are created, regular files
/// written (unless `keep_existing` and the file is there). Links and devices from inside a
/// container have no business on the host and are skipped. Returns whether the budget allows
/// going on.
fn write_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    target: &Path,
    keep_existing: bool,
    budget: &mut Budget,
) -> std::io::Result<bool> {
    match entry.header().entry_type() {
        tar::EntryType::Directory => std::fs::create_dir_all(target)?,
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            if keep_existing && target.exists() {
                return Ok(true);
            }
            let size = entry.header().size().unwrap_or(0);
            let Some(room) = budget.room(size) else { return Ok(false) };
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // A file that crosses the byte limit keeps its head, as does one the archive ends in
            // (a download cut at its limit): the start of a huge log is what a reader wants.
            let mut file = std::fs::File::create(target)?;
            let mut head = entry.take(room);
            let mut buffer = vec![0u8; 64 * 1024];
            let mut copied = 0u64;
            let ended = loop {
                match head.read(&mut buffer) {
                    Ok(0) => break None,
                    Ok(n) => {
                        std::io::Write::write_all(&mut file, &buffer[..n])?;
                        copied += n as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Some(e),
                }
            };
            budget.wrote(copied);
            if let Some(e) = ended {
                return Err(e);
            }
            if room < size {
                return Ok(false);
            }
        }
        _ => {}
    }
    Ok(true)
}

/// Goes through an archive's entries, giving each with its path to `place`, within `limits`.
fn unpack_with<R: Read>(
    archive: R,
    limits: UnpackLimits,
    mut place: impl FnMut(&Path, &tar::EntryType) -> Option<(PathBuf, bool)>,
) -> std::io::Result<Unpacked> {
    let mut reader = tar::Archive::new(archive);
    let mut budget = Budget::new(limits);
    let entries = match reader.entries() {
        Ok(entries) => entries,
        Err(e) => {
            budget.broken(&e);
            return Ok(budget.done);
        }
    };
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                budget.broken(&e);
                break;
            }
        };
        let path = match entry.path() {
            Ok(path) => path.into_owned(),
            Err(_) => continue,
        };
        let Some((target, keep)) = place(&path, &entry.header().entry_type()) else { continue };
        match write_entry(&mut entry, &target, keep, &mut budget) {
            Ok(true) => {}
            Ok(false) => break,
            // Reading the entry failed: the archive was cut.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                budget.broken(&e);
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(budget.done)
}

/// Unpacks a downloaded archive into `dest`, dropping the first path component (the engine names
/// it after the requested directory). Entries that would escape `dest` are skipped, and existing
/// files are kept when `keep_existing` is set (files the host already wrote win).
pub fn unpack_stripped(
    archive: impl Read,
    dest: &Path,
    keep_existing: bool,
    limits: UnpackLimits,
) -> std::io::Result<Unpacked> {
    unpack_with(archive, limits, |path, _| strip_first(path).map(|rel| (dest.join(rel), keep_existing)))
}

/// [`unpack_stripped`], leaving out every entry whose first component below `dest` is a name
/// `reserved` says the host writes there itself: whatever the archive holds under it never
/// lands, and the names left out are listed in [`Unpacked::reserved`].
pub fn unpack_stripped_reserving(
    archive: impl Read,
    dest: &Path,
    limits: UnpackLimits,
    reserved: impl Fn(&str) -> bool,
) -> std::io::Result<Unpacked> {
    let mut left_out: Vec<String> = Vec::new();
    let mut done = unpack_with(archive, limits, |path, _| {
        let rel = strip_first(path)?;
        let top = rel.components().next()?.as_os_str().to_string_lossy().into_owned();
        if reserved(&top) {
            if !left_out.contains(&top) {
                left_out.push(top);
            }
            return None;
        }
        Some((dest.join(rel), true))
    })?;
    done.reserved = left_out;
    Ok(done)
}

/// Unpacks a downloaded archive so that its top entry becomes `dest`: a file lands at `dest`, a
/// directory's contents under `dest/`.
pub fn unpack_renamed(archive: impl Read, dest: &Path, limits: UnpackLimits) -> std::io::Result<Unpacked> {
    unpack_excluding(archive, dest, &[], limits)
}

/// [`unpack_renamed`], leaving out what `exclude` names, as `tar --exclude` reads its patterns
/// (Harbor passes an artifact's `exclude` to tar): a shell wildcard (`*`, `?`, `[…]`; `*`
/// matches `/` too) that matches an entry's name or any run of whole components in its path
/// (`*.tmp` anywhere, `cache` with everything below it, `build/*.o`).
pub fn unpack_excluding(
    archive: impl Read,
    dest: &Path,
    exclude: &[String],
    limits: UnpackLimits,
) -> std::io::Result<Unpacked> {
    unpack_with(archive, limits, |path, _| {
        if !exclude.is_empty() && excluded(path, exclude) {
            return None;
        }
        match strip_first(path) {
            Some(rest) => Some((dest.join(rest), false)),
            // The top entry itself: the file, or the directory.
            None if path.components().count() == 1 => Some((dest.to_path_buf(), false)),
            None => None,
        }
    })
}

/// Whether a run of whole components of `path` matches one of `patterns`.
fn excluded(path: &Path, patterns: &[String]) -> bool {
    let parts: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    (0..parts.len()).any(|start| {
        (start + 1..=parts.len()).any(|end| {
            let run = parts[start..end].join("/");
            patterns.iter().any(|p| wildcard(p.trim_end_matches('/').as_bytes(), run.as_bytes()))
        })
    })
}

/// A shell wildcard match of the whole `text` (`*` any run, `?` one byte, `[abc]`, `[a-z]`,
/// `[!x]`; `\\` quotes the next byte).
fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, text[t]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&c) => (c == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((sp, st))) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A `[…]` class at `pattern[at]` against `byte`: the index after it when it matches.
fn class(pattern: &[u8], at: usize, byte: u8) -> Option<usize> {
    let mut i = at + 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while let Some(&c) = pattern.get(i) {
        if c == b']' && !first {
            return (matched != negated).then_some(i + 1);
        }
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&e| e != b']') {
            matched |= (c..=pattern[i + 2]).contains(&byte);
            i += 3;
        } else {
            matched |= c == byte;
            i += 1;
        }
        first = false;
    }
    // No closing bracket: a literal `[`.
    (byte == b'[').then_some(at + 1)
}

/// Unpacks an archive of a directory whose subdirectories go to different places: the entry
/// `top/<name>/rest` lands at `<dest of name>/rest` for each route `(name, dest, keep_existing)`;
/// other entries are skipped.
pub fn unpack_routed(
    archive: impl Read,
    routes: &[(&str, &Path, bool)],
    limits: UnpackLimits,
) -> std::io::Result<Unpacked> {
    unpack_with(archive, limits, |path, kind| {
        let rel = strip_first(path)?;
        let mut parts = rel.components();
        let first = parts.next()?;
        let rest: PathBuf = parts.collect();
        let (_, dest, keep) = routes.iter().find(|(name, _, _)| first.as_os_str() == *name)?;
        // A file named like a route (not a directory) has nowhere to go.
        if rest.as_os_str().is_empty() && *kind != tar::EntryType::Directory {
            return None;
        }
        Some((dest.join(&rest), *keep))
    })
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
mod exclusion_tests {
    use super::{excluded, wildcard};
    use std::path::Path;

    #[test]
    fn wildcards_match_as_the_shell_and_tar_read_them() {
        let w = |p: &str, t: &str| wildcard(p.as_bytes(), t.as_bytes());
        assert!(w("*.tmp", "a.tmp") && w("*.tmp", "dir/a.tmp") && !w("*.tmp", "a.tmpx"));
        assert!(w("a?c", "abc") && !w("a?c", "ac"));
        assert!(w("[ab]x", "bx") && !w("[!ab]x", "bx") && w("[a-c]1", "c1") && !w("[a-c]1", "d1"));
        assert!(w("\\*", "*") && !w("\\*", "a"));
        assert!(w("*", "") && w("**", "x/y") && !w("", "x"));
        let ex = |path: &str, patterns: &[&str]| {
            excluded(Path::new(path), &patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
        };
        assert!(ex("logs/run/a.tmp", &["*.tmp"]));
        assert!(ex("logs/cache/deep/file", &["cache"]), "a directory takes what is below it");
        assert!(ex("logs/build/x.o", &["build/*.o"]) && !ex("logs/src/x.o", &["build/*.o"]));
        assert!(!ex("logs/keep.txt", &["*.tmp", "cache"]));
        assert!(ex("logs/cache/", &["cache/"]), "a trailing slash names the directory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_or_a_directory_is_packed_under_the_name_given() {
        let tmp = std::env::temp_dir().join(format!("terminus-tar-path-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("dir/sub")).unwrap();
        std::fs::write(tmp.join("dir/sub/a.txt"), "A").unwrap();
        std::fs::write(tmp.join("file.txt"), "F").unwrap();
        let names = |archive: Vec<u8>| -> Vec<(String, String)> {
            let mut reader = tar::Archive::new(&archive[..]);
            let entries = reader.entries().unwrap();
            entries
                .map(|e| {
                    let mut e = e.unwrap();
                    let mut text = String::new();
                    e.read_to_string(&mut text).unwrap();
                    (e.path().unwrap().to_string_lossy().trim_end_matches('/').to_string(), text)
                })
                .collect()
        };
        let file = names(tar_path(&tmp.join("file.txt"), "app/out.txt").unwrap());
        assert_eq!(file, [("app/out.txt".to_string(), "F".to_string())]);
        let dir = names(tar_path(&tmp.join("dir"), "logs/artifacts").unwrap());
        assert!(dir.contains(&("logs/artifacts/sub/a.txt".to_string(), "A".to_string())), "{dir:?}");
        assert!(tar_path(&tmp.join("missing"), "x").is_err());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn round_trip_strips_the_top_directory() {
        let tmp = std::env::temp_dir().join(format!("terminus-archive-{}", std::process::id()));
        let src = tmp.join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a.txt"), "A").unwrap();
        let archive = tar_dir(&src, "logs").unwrap();
        let dest = tmp.join("dest");
        let limits = UnpackLimits::default();
        assert_eq!(unpack_stripped(archive.as_slice(), &dest, false, limits).unwrap().files, 1);
        assert_eq!(std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(), "A");
        std::fs::write(dest.join("sub/a.txt"), "host").unwrap();
        unpack_stripped(archive.as_slice(), &dest, true, limits).unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("sub/a.txt")).unwrap(), "host");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Names the host writes itself are never unpacked, whatever is under them, and are listed.
    #[test]
    fn reserved_names_are_left_out_and_listed() {
        let tmp = std::env::temp_dir().join(format!("terminus-reserved-{}", std::process::id()));
        let src = tmp.join("src");
        std::fs::create_dir_all(src.join("episode-00")).unwrap();
        std::fs::write(src.join("episode-00/response.txt"), "planted").unwrap();
        std::fs::write(src.join("trajectory.json"), "{}").unwrap();
        std::fs::write(src.join("notes.txt"), "kept").unwrap();
        let archive = tar_dir(&src, "agent").unwrap();
        let dest = tmp.join("dest");
        let reserved = |name: &str| name.starts_with("episode-") || name == "trajectory.json";
        let out = unpack_stripped_reserving(archive.as_slice(), &dest, UnpackLimits::default(), reserved).unwrap();
        assert_eq!(out.files, 1);
        let mut listed = out.reserved.clone();
        listed.sort();
        assert_eq!(listed, ["episode-00", "trajectory.json"]);
        assert!(!dest.join("episode-00").exists() && !dest.join("trajectory.json").exists());
        assert_eq!(std::fs::read_to_string(dest.join("notes.txt")).unwrap(), "kept");
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
        let routes = [("agent", agent.as_path(), true), ("verifier", verifier.as_path(), false)];
        let n = unpack_routed(archive.as_slice(), &routes, UnpackLimits::default()).unwrap().files;
        assert_eq!(n, 2);
        assert_eq!(std::fs::read_to_string(agent.join("pane")).unwrap(), "P");
        assert_eq!(std::fs::read_to_string(verifier.join("reward.txt")).unwrap(), "1");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn unpacking_stops_at_its_limits_and_keeps_a_cut_archive_s_head() {
        let tmp = tempfile_dir("limits");
        let src = tmp.join("logs");
        std::fs::create_dir_all(&src).unwrap();
        for i in 0..10 {
            std::fs::write(src.join(format!("f{i}")), vec![b'x'; 1000]).unwrap();
        }
        let archive = tar_dir(&src, "logs").unwrap();
        let few = UnpackLimits { max_files: 3, max_bytes: u64::MAX };
        let out = unpack_stripped(archive.as_slice(), &tmp.join("a"), false, few).unwrap();
        assert_eq!(out.files, 3);
        assert_eq!(out.cut.as_deref(), Some("more than 3 files"));
        let small = UnpackLimits { max_files: 100, max_bytes: 4500 };
        let out = unpack_stripped(archive.as_slice(), &tmp.join("b"), false, small).unwrap();
        assert_eq!((out.files, out.bytes), (5, 4500), "four files and the head of the fifth");
        assert!(out.cut.unwrap().starts_with("more than 0 MiB"));
        let sizes: Vec<u64> =
            (0..5).map(|i| std::fs::metadata(tmp.join("b").join(format!("f{i}"))).unwrap().len()).collect();
        assert_eq!(sizes.iter().filter(|s| **s == 500).count(), 1, "{sizes:?}");
        // A download cut in the middle of an entry: what came before it is kept.
        let cut = &archive[..archive.len() / 2];
        let out = unpack_stripped(cut, &tmp.join("c"), false, UnpackLimits::default()).unwrap();
        assert!(out.files >= 3 && out.files < 10, "{out:?}");
        assert!(out.cut.unwrap().starts_with("the archive ends early"));
        // Cut 300 bytes into one file's data (its header's name field starts the header): that
        // file keeps its 300 bytes.
        let header = archive.windows(8).position(|w| w == b"logs/f5\0").unwrap();
        let out =
            unpack_stripped(&archive[..header + 512 + 300], &tmp.join("d"), false, UnpackLimits::default()).unwrap();
        assert_eq!(std::fs::metadata(tmp.join("d/f5")).unwrap().len(), 300, "{out:?}");
        assert!(out.cut.is_some_and(|cut| cut.starts_with("the archive ends early")));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    fn tempfile_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("terminus-archive-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn escaping_paths_are_skipped() {
        assert_eq!(strip_first(Path::new("logs/../../etc/passwd")), None);
        assert_eq!(strip_first(Path::new("logs")), None);
        assert_eq!(strip_first(Path::new("logs/a/b")), Some(PathBuf::from("a/b")));
    }
}
