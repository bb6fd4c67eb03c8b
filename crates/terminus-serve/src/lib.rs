//! `terminus serve`: one process that takes jobs over HTTP (Harbor 0.26's API), runs them with
//! the same Supervisor as `terminus run` under one limit on running trials, keeps its queue and
//! results in SQLite, and resumes what was running when it starts again.
//!
//! ```text
//!  HTTP ─► api (routes, auth, problem+json) ─► Service ─► start_job_with ─► Supervisor ×jobs
//!                      │                          │  ▲                          │
//!                      ▼                          ▼  └── pump (events, status) ◄┘
//!                query (read-only SQL)      store (SQLite, WAL)
//! ```

pub mod api;
pub mod error;
pub mod query;
pub mod service;
pub mod store;
pub mod wire;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

pub use error::ServeError;
pub use service::Service;

/// Harbor's port.
pub const DEFAULT_PORT: u16 = 8390;

/// How `terminus serve` was asked to run.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub data_dir: PathBuf,
    pub host: IpAddr,
    pub port: u16,
    /// Bearer key every request must carry; without one, only loopback clients are served.
    pub api_key: Option<String>,
    /// Trials running at once over every job.
    pub max_concurrent: usize,
}

/// Why the service did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("a key is required to serve on {0}: set HARBOR_API_KEY (keyless access is for loopback addresses only)")]
    KeyRequired(IpAddr),
    #[error("the API key is empty")]
    EmptyKey,
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Service(#[from] ServeError),
}

/// A running service.
pub struct Server {
    pub addr: SocketAddr,
    pub service: Arc<Service>,
    join: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Waits until the HTTP server stops (it runs until the process ends).
    pub async fn wait(self) {
        let _ = self.join.await;
    }
}

/// Opens the data directory, resumes the jobs that had not ended, and serves the API.
pub async fn start(options: ServeOptions) -> Result<Server, StartError> {
    if options.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        return Err(StartError::EmptyKey);
    }
    if options.api_key.is_none() && !options.host.is_loopback() {
        return Err(StartError::KeyRequired(options.host));
    }
    let service = Service::open(&options.data_dir, options.max_concurrent)?;
    let addr = SocketAddr::new(options.host, options.port);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| StartError::Bind { addr, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr, source })?;
    let resumed = service.recover().await;
    if resumed > 0 {
        tracing::info!(resumed, "resumed the jobs that were running when the service stopped");
    }
    let app = Arc::new(api::App { service: service.clone(), api_key: options.api_key });
    let router = api::router(app).into_make_service_with_connect_info::<SocketAddr>();
    let join = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the HTTP server stopped");
        }
    });
    Ok(Server { addr, service, join })
}
