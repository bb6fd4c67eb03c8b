//! `terminus-mock-llm --script script.yaml [--port N]`: serves a scripted OpenAI-compatible API
//! on 127.0.0.1 until interrupted. Point a job's `api_base` at the printed address to dry-run it.

use terminus_mock_llm::{MockServer, Script};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut script_path, mut port) = (None, 0u16);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--script" => script_path = args.next(),
            "--port" => {
                port =
                    args.next().and_then(|p| p.parse().ok()).ok_or_else(|| anyhow::anyhow!("--port needs a number"))?
            }
            "-h" | "--help" => {
                println!("usage: terminus-mock-llm --script SCRIPT.yaml [--port N]");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (see --help)"),
        }
    }
    let path = script_path.ok_or_else(|| anyhow::anyhow!("--script is required (see --help)"))?;
    let script = Script::from_yaml(&std::fs::read_to_string(&path)?)?;
    let server = MockServer::start(script, port).await?;
    println!("listening on {}", server.api_base());
    tokio::signal::ctrl_c().await?;
    server.shutdown();
    Ok(())
}
