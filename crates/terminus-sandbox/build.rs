//! Builds the warden (`crates/terminus-warden`), the program every trial container gets
//! read-only for its verification, as one statically linked executable for the target, so
//! that it runs in any image whatever its C library; `src/warden.rs` embeds it.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let source = manifest.join("../terminus-warden/src");
    println!("cargo:rerun-if-changed={}", source.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("terminus-warden");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    #[expect(clippy::disallowed_methods, reason = "a build script compiles the warden with the toolchain's rustc")]
    let status = std::process::Command::new(rustc)
        .args(["--edition", "2024", "--crate-name", "terminus_warden", "--crate-type", "bin", "--target", &target])
        .args(["-C", "opt-level=s", "-C", "panic=abort", "-C", "strip=symbols", "-C", "target-feature=+crt-static"])
        .arg(source.join("main.rs"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("rustc runs");
    assert!(
        status.success(),
        "compiling the warden failed (static linking needs the C library's static archive: libc6-dev)"
    );
}
