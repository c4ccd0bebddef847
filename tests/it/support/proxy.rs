//! A TCP forwarder the test controls, standing between the gateway and a real service (e.g.
//! PostgreSQL), so a dependency can "go away" without disturbing anything else on the machine.

use std::time::Duration;

/// `stop` closes the listener and every forwarded connection; `restart` listens again on the
/// same port.
pub struct TcpProxy {
    pub port: u16,
    target: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TcpProxy {
    pub async fn start(target: &str) -> TcpProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = TcpProxy {
            port,
            target: target.to_string(),
            task: None,
        };
        proxy.run(listener);
        proxy
    }

    fn run(&mut self, listener: tokio::net::TcpListener) {
        let target = self.target.clone();
        self.task = Some(tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let target = target.clone();
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
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
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop();
    }
}
