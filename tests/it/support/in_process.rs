//! A gateway inside the test process: the library's `App` serving on a loopback listener, with
//! its own database and reference upstream (a real process) exactly like [`Gateway`]. For tests
//! where killing or restarting a process is not the point, and that read neither the gateway's
//! logs nor its metrics (no logger or metrics recorder is installed in the test process). It
//! starts faster than a process, and stops (draining like `serve`) when dropped.
//!
//! [`Gateway`]: super::gateway::Gateway

use std::collections::HashMap;
use std::time::Duration;

use q_a2a_gateway::app::App;
use q_a2a_gateway::config::Config;
use q_a2a_gateway::server::ConnectionLimits;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::db::TestDb;
use super::gateway::{migrate, settings, GatewayOptions};
use super::process::repo_path;
use super::rpc::Caller;
use super::upstream::Upstream;

pub struct InProcessGateway {
    pub url: String,
    pub db: TestDb,
    pub upstream: Upstream,
    stop: watch::Sender<bool>,
}

impl InProcessGateway {
    pub async fn start_with(options: GatewayOptions) -> InProcessGateway {
        let db = TestDb::create().await;
        let upstream = Upstream::start().await;
        if options.migrate {
            let out = migrate(&db, &upstream.url).await;
            assert!(out.status.success(), "migrate failed: {out:?}");
        }
        let overrides: HashMap<String, String> =
            settings(&db, &upstream.url, &options).into_iter().collect();
        let config = Config::load_with(Some(&repo_path("config/gateway.toml")), |name| {
            overrides.get(name).cloned()
        })
        .expect("test configuration");
        let app = App::new(&config).expect("gateway services");
        assert!(
            app.check_rollout().await.expect("rollout checks"),
            "the database answers"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(app.run(
            listener,
            None,
            Duration::from_secs(2),
            ConnectionLimits::from_config(&config),
            stopped,
        ));
        InProcessGateway {
            url,
            db,
            upstream,
            stop,
        }
    }

    /// A caller with this bearer token.
    pub fn caller(&self, token: &str) -> Caller {
        Caller::at(&self.url, token)
    }
}

impl Drop for InProcessGateway {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
