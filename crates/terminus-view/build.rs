//! Embeds the viewer's browser assets (`web/dist/`, built from npm packages by
//! `scripts/setup.sh`) into the binary, so no Node.js is needed at run time. Without them the
//! crate still builds: the list is empty and the server answers with a plain page saying how to
//! build them.

use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dist = manifest.join("web").join("dist");
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
        println!("cargo:rerun-if-changed={}", dist.display());
    } else {
        // Rebuilt once the assets appear (a missing path would make cargo rerun every build).
        println!("cargo:rerun-if-changed={}", manifest.join("web").join("package.json").display());
        println!("cargo:rerun-if-changed={}", manifest.join("web").display());
    }
    files.sort();
    let mut out =
        String::from("/// The embedded assets: path below `dist/`, bytes.\npub static ASSETS: &[(&str, &[u8])] = &[\n");
    for (rel, abs) in &files {
        out.push_str(&format!("    ({rel:?}, include_bytes!({:?})),\n", abs.display().to_string()));
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("assets.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            collect(root, &path, out);
        } else if kind.is_file() {
            let rel = path.strip_prefix(root).expect("below the root").to_string_lossy().replace('\\', "/");
            out.push((rel, path));
        }
    }
}
