//! A TCP proxy between a client and a real server that can lose the server's replies, the
//! way a network that drops a connection after the request went through does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub struct Proxy {
    pub port: u16,
    drop_replies: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl Proxy {
    /// Forwards 127.0.0.1:`port` to 127.0.0.1:`upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let drop_replies = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let (flag, stopped) = (drop_replies.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = stopped.cancelled() => return,
                };
                let Ok((client, _)) = accepted else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                tokio::spawn(pump(client, server, flag.clone(), stopped.child_token()));
            }
        });
        Proxy { port, drop_replies, stop }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// While set, requests still reach the server, but its replies are thrown away and the
    /// client's connection is closed.
    pub fn drop_replies(&self, drop: bool) {
        self.drop_replies.store(drop, SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn pump(
    client: TcpStream,
    server: TcpStream,
    drop_replies: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = async {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
            if server_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    let replies = async {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
            if drop_replies.load(SeqCst) {
                break; // the reply is lost and the connection goes down with it
            }
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = replies => {}
        () = stop.cancelled() => {}
    }
}
