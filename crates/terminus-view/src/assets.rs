//! The browser side, embedded at build time (see `build.rs`), and the plain page served when it
//! was not built.

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// An embedded file by its path below `dist/`.
pub fn get(path: &str) -> Option<&'static [u8]> {
    ASSETS.iter().find(|(name, _)| *name == path).map(|(_, bytes)| *bytes)
}

/// Whether the browser assets are in this binary.
pub fn present() -> bool {
    get("index.html").is_some()
}

/// The content type of an asset, by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "wasm" => "application/wasm",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// The page served in place of the application when its assets were not built: what to do
/// about it, and the jobs as plain links, so the viewer is still of some use.
pub fn fallback_page(jobs: &[(String, String)]) -> String {
    let mut rows = String::new();
    for (name, state) in jobs {
        let name = escape(name);
        rows.push_str(&format!("<li><a href=\"/api/jobs/{name}\">{name}</a> ({}) </li>\n", escape(state)));
    }
    if rows.is_empty() {
        rows.push_str("<li>no jobs in this directory</li>\n");
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>terminus view</title></head><body>\n\
         <h1>terminus view</h1>\n\
         <p><strong>The viewer's browser assets are not built into this binary.</strong> \
         Run <code>scripts/setup.sh</code> (it builds <code>crates/terminus-view/web</code> with npm), \
         then <code>cargo build --release</code> again. Until then, the JSON API answers: \
         <a href=\"/api/jobs\">/api/jobs</a>.</p>\n<h2>Jobs</h2>\n<ul>\n{rows}</ul>\n</body></html>\n"
    )
}

/// HTML-escapes text for the fallback page.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_page_says_what_to_do_and_escapes_job_names() {
        let page = fallback_page(&[("<script>x</script>".into(), "finished".into())]);
        assert!(page.contains("scripts/setup.sh"));
        assert!(page.contains("&lt;script&gt;x&lt;/script&gt;") && !page.contains("<script>x"));
        assert!(fallback_page(&[]).contains("no jobs"));
        assert_eq!(content_type("app.js"), "text/javascript; charset=utf-8");
    }
}
