//! A TCP forwarder the test controls, standing between the gateway and a real service (e.g.
//! PostgreSQL), so a dependency can "go away" without disturbing anything else on the machine.

use std::time::Duration;

use tokio::sync::watch;

/// `stop` closes the listener and every forwarded connection; `restart` listens again on the
/// same port. `retarget` sends new connections elsewhere and leaves those already forwarded
/// where they are: a DNS name or a Service that moved to another server. `black_hole` keeps everything open and moves nothing: connections already
/// forwarded stop mid-flight, new ones are accepted and never answered, until `forward`, which
/// closes them all and forwards again.
pub struct TcpProxy {
    pub port: u16,
    target: std::sync::Arc<std::sync::Mutex<String>>,
    task: Option<tokio::task::JoinHandle<()>>,
    silent: watch::Sender<bool>,
}

impl TcpProxy {
    pub async fn start(target: &str) -> TcpProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = TcpProxy {
            port,
            target: std::sync::Arc::new(std::sync::Mutex::new(target.to_string())),
            task: None,
            silent: watch::channel(false).0,
        };
        proxy.run(listener);
        proxy
    }

    fn run(&mut self, listener: tokio::net::TcpListener) {
        let target = self.target.clone();
        let silent = self.silent.subscribe();
        self.task = Some(tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let target = target.lock().unwrap().clone();
                let mut silent = silent.clone();
                connections.spawn(async move {
                    if *silent.borrow() {
                        // Accepted, never read from, never answered.
                        let _ = silent.wait_for(|s| !*s).await.map(|_| ());
                        return;
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let moved = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
                        _ = async { let _ = silent.wait_for(|s| *s).await.map(|_| ()); } => true,
                    };
                    if moved {
                        // Both ends stay open and nothing moves until forwarding resumes.
                        let _ = silent.wait_for(|s| !*s).await.map(|_| ());
                    }
                });
            }
            // Dropping the task drops the JoinSet, which aborts every forwarded connection.
        }));
    }

    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    pub async fn restart(&mut self) {
        self.stop();
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("rebinding proxy port {}: {e}", self.port),
            }
        };
        self.run(listener);
    }

    /// New connections go to `target` from now on; those already forwarded stay.
    pub fn retarget(&self, target: &str) {
        *self.target.lock().unwrap() = target.to_string();
    }

    /// Stops moving bytes, with every connection left open.
    pub fn black_hole(&self) {
        self.silent.send_replace(true);
    }

    /// Closes the connections held silent and forwards new ones again.
    pub fn forward(&self) {
        self.silent.send_replace(false);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop();
    }
}
