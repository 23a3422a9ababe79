//! A TCP proxy between clients and a real server that injects the faults networks have:
//! replies lost after the request went through, connections cut, a black hole, latency.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the proxy does to the traffic it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything.
    #[default]
    None,
    /// Requests still reach the server, but its replies are thrown away and the client's
    /// connection is closed: the command ran, the client never hears.
    DropReplies,
    /// Nothing moves in either direction, and new connections get no answer; what was sent
    /// waits in the sockets and flows on once healed, as TCP retransmission would deliver
    /// it after a partition.
    BlackHole,
    /// Every chunk, both ways, is delivered this much later (order is kept).
    Latency(Duration),
    /// The client's requests are held back (its connection stays open and quiet) until
    /// the fault is lifted; then they flow on, except HTTP/2 stream resets (`RST_STREAM`),
    /// which are dropped: a member whose link stalled and that never learnt the client gave
    /// up, so a request it gets late still runs. Replies flow as usual.
    HoldRequests,
}

/// A proxy from `127.0.0.1:port` to `127.0.0.1:upstream`, stopped on drop.
pub struct Proxy {
    /// The port clients connect to.
    pub port: u16,
    fault: watch::Sender<Fault>,
    connections: Arc<Mutex<CancellationToken>>,
    /// Cancelled by [`freeze`](Self::freeze): the connections open then carry nothing more.
    frozen: Arc<Mutex<CancellationToken>>,
    stop: CancellationToken,
}

impl Proxy {
    /// Forwards 127.0.0.1:`port` to 127.0.0.1:`upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = watch::Sender::new(Fault::None);
        let stop = CancellationToken::new();
        let connections = Arc::new(Mutex::new(stop.child_token()));
        let frozen = Arc::new(Mutex::new(CancellationToken::new()));
        let (faults, stopped, live) = (fault.clone(), stop.clone(), connections.clone());
        let freezes = frozen.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = stopped.cancelled() => return,
                };
                let Ok((client, _)) = accepted else { return };
                let cut = live.lock().await.child_token();
                let freeze = freezes.lock().await.clone();
                tokio::spawn(carry(client, upstream, faults.subscribe(), cut, freeze));
            }
        });
        Proxy { port, fault, connections, frozen, stop }
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sets the fault from now on (connections open now included).
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// While set, requests still reach the server, but its replies are thrown away and the
    /// client's connection is closed.
    pub fn drop_replies(&self, drop: bool) {
        self.set(if drop { Fault::DropReplies } else { Fault::None });
    }

    /// The connections open now go silent for good, both ways, and stay open: what a
    /// firewall or NAT that dropped an idle connection's state does (neither side hears a
    /// thing until its own timeout). New connections are carried as before.
    pub async fn freeze(&self) {
        let mut frozen = self.frozen.lock().await;
        frozen.cancel();
        *frozen = CancellationToken::new();
    }

    /// Closes every open connection at once; new ones are carried as before.
    pub async fn cut(&self) {
        let mut live = self.connections.lock().await;
        live.cancel();
        *live = self.stop.child_token();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Carries one client connection until either side closes, it is cut or the fault says so.
async fn carry(
    client: TcpStream,
    upstream: u16,
    mut fault: watch::Receiver<Fault>,
    cut: CancellationToken,
    frozen: CancellationToken,
) {
    // A black hole answers no new connection either.
    let opened = tokio::select! {
        opened = wait_out_black_hole(&mut fault) => opened,
        () = cut.cancelled() => None,
    };
    if opened.is_none() {
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    // As the client and server would set it: a proxy that waits to coalesce small writes
    // (Nagle's algorithm against a delayed ACK) adds tens of milliseconds to a reply.
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pump(client_read, server_write, fault.clone(), false, frozen.clone()) => {}
        () = pump(server_read, client_write, fault, true, frozen) => {}
        () = cut.cancelled() => {}
    }
}

/// Moves bytes one way, applying the fault; `replies` is the server-to-client direction.
async fn pump(
    mut from: OwnedReadHalf,
    to: OwnedWriteHalf,
    mut fault: watch::Receiver<Fault>,
    replies: bool,
    frozen: CancellationToken,
) {
    // A writer task delivers each chunk at its due time, so latency keeps pipelining.
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let frozen_writer = frozen.clone();
    let writer = async move {
        let mut to = to;
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if frozen_writer.is_cancelled() {
                // Silent for good, and open: the socket is kept, nothing is written.
                std::future::pending::<()>().await;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        // The requests of an HTTP/2 connection, split into frames, and those held back.
        let mut frames = (!replies).then(H2Frames::default);
        let mut held: Vec<Vec<u8>> = Vec::new();
        loop {
            let Some(current) = wait_out_black_hole(&mut fault).await else { return };
            if current != Fault::HoldRequests && !held.is_empty() {
                // Lifted: what was held flows on, without the resets sent meanwhile.
                let http2 = frames.as_ref().is_some_and(|frames| frames.http2 == Some(true));
                for frame in held.drain(..).filter(|frame| !(http2 && is_reset(frame))) {
                    if chunks.send((Instant::now(), frame)).is_err() {
                        return;
                    }
                }
            }
            let n = tokio::select! {
                read = from.read(&mut buffer) => match read {
                    Ok(n @ 1..) => n,
                    _ => return,
                },
                // A black hole that starts while we wait for bytes: stop reading at once.
                _ = fault.changed() => continue,
                // Frozen: read nothing more, and keep the socket open.
                () = frozen.cancelled() => std::future::pending::<usize>().await,
            };
            let delay = match current {
                Fault::DropReplies if replies => return, // lost, and the connection with it
                Fault::Latency(delay) => delay,
                _ => Duration::ZERO,
            };
            let chunk = buffer[..n].to_vec();
            let Some(splitter) = frames.as_mut() else {
                if chunks.send((Instant::now() + delay, chunk)).is_err() {
                    return;
                }
                continue;
            };
            for frame in splitter.push(&chunk) {
                if current == Fault::HoldRequests {
                    held.push(frame);
                } else if chunks.send((Instant::now() + delay, frame)).is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = writer => {}
        () = reader => {}
    }
}

/// Splits a client's bytes into HTTP/2 frames (the connection preface counts as one), so
/// requests can be held back and resets dropped whole; bytes of any other protocol pass as
/// they come.
#[derive(Default)]
struct H2Frames {
    /// Whether the connection began with the HTTP/2 preface (`None`: not known yet).
    http2: Option<bool>,
    pending: Vec<u8>,
}

/// What every HTTP/2 connection begins with.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl H2Frames {
    /// The whole frames `bytes` complete; a partial one waits for the rest.
    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(bytes);
        if self.http2.is_none() {
            if self.pending.len() < PREFACE.len() && PREFACE.starts_with(&self.pending) {
                return Vec::new();
            }
            let http2 = self.pending.starts_with(PREFACE);
            self.http2 = Some(http2);
            if http2 {
                let rest = self.pending.split_off(PREFACE.len());
                let preface = std::mem::replace(&mut self.pending, rest);
                let mut frames = vec![preface];
                frames.extend(self.push(&[]));
                return frames;
            }
        }
        if self.http2 == Some(false) {
            return vec![std::mem::take(&mut self.pending)];
        }
        let mut frames = Vec::new();
        while self.pending.len() >= 9 {
            let length = usize::from(self.pending[0]) << 16
                | usize::from(self.pending[1]) << 8
                | usize::from(self.pending[2]);
            if self.pending.len() < 9 + length {
                break;
            }
            let rest = self.pending.split_off(9 + length);
            frames.push(std::mem::replace(&mut self.pending, rest));
        }
        frames
    }
}

/// Whether an HTTP/2 frame is a stream reset (`RST_STREAM`, type 3).
fn is_reset(frame: &[u8]) -> bool {
    frame.len() >= 9 && frame[3] == 0x3 && !frame.starts_with(PREFACE)
}

/// Waits while the fault is a black hole; returns the fault then in force, or `None` if the
/// proxy stopped meanwhile.
async fn wait_out_black_hole(fault: &mut watch::Receiver<Fault>) -> Option<Fault> {
    loop {
        let current = *fault.borrow_and_update();
        if current != Fault::BlackHole {
            return Some(current);
        }
        fault.changed().await.ok()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http2_requests_split_into_frames_and_resets_are_known() {
        let mut frames = H2Frames::default();
        let reset = [0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8];
        let data = [0, 0, 2, 0, 1, 0, 0, 0, 1, 7, 7];
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(&data);
        bytes.extend_from_slice(&reset[..5]);
        let split = frames.push(&bytes);
        assert_eq!(split, [PREFACE.to_vec(), data.to_vec()]);
        let rest = frames.push(&reset[5..]);
        assert_eq!(rest, [reset.to_vec()]);
        assert!(is_reset(&rest[0]) && !is_reset(&split[1]));
        let mut other = H2Frames::default();
        assert_eq!(other.push(b"*1\r\n$4\r\nPING\r\n"), [b"*1\r\n$4\r\nPING\r\n".to_vec()]);
    }
}
