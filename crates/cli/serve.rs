//! `terminus serve`: the job service in the foreground, its log on stderr. Ctrl-C (or SIGTERM)
//! removes the running trials' containers and exits; the next start resumes those trials.

use std::time::Duration;

use terminus_serve::{ServeOptions, StartError};

use crate::args::ServeArgs;
use crate::exit;

pub async fn serve(args: ServeArgs) -> u8 {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERMINUS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(ansi).with_env_filter(filter).try_init();
    if args.max_concurrent == 0 {
        eprintln!("error: --max-concurrent must be at least 1");
        return exit::INVALID;
    }
    let options = ServeOptions {
        data_dir: args.data_dir.clone(),
        host: args.host,
        port: args.port,
        api_key: std::env::var("HARBOR_API_KEY").ok(),
        max_concurrent: args.max_concurrent,
    };
    let server = match terminus_serve::start(options).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("error: {e}");
            if matches!(e, StartError::Bind { .. }) {
                eprintln!("hint: choose another --port (0 takes any free port)");
            }
            return exit::INVALID;
        }
    };
    let host = match server.addr.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    println!("terminus serve: http://{host}:{} (data in {})", server.addr.port(), server.service.data_dir().display());
    let service = server.service.clone();
    let mut interrupts = crate::job::Interrupts::listen();
    tokio::select! {
        _ = server.wait() => exit::OK,
        _ = interrupts.next() => {
            service.close();
            let swept = tokio::time::timeout(Duration::from_secs(30), service.stop_running()).await;
            if swept.is_err() {
                eprintln!("warning: some containers of running trials may be left; the next start removes them");
            }
            let limit = service.shared_limit();
            tracing::info!(peak_running = limit.peak(), limit = limit.limit(), "the most trials that ran at once over every job");
            eprintln!("stopped; running trials run again when the service starts with --data-dir {}", args.data_dir.display());
            exit::OK
        }
    }
}
