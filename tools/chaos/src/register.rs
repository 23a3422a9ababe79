//! The fenced register: the downstream store every leader writes to. With one slot it
//! accepts a write only if its fence is at least the highest it has seen (Kleppmann's
//! fencing). A group of several slots has no single order of fences to enforce, so there
//! it accepts every write, and the checker judges each one against the writer's lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::events::now_micros;

/// One write the register received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterWrite {
    /// When the register decided, µs since the epoch.
    pub at: u64,
    /// The register key written (a group's, or a partition's).
    pub key: String,
    /// The writer's holder id.
    pub holder: String,
    /// The fence it wrote with.
    pub fence: u64,
    /// Whether the register accepted it.
    pub accepted: bool,
}

#[derive(Default)]
struct State {
    highest: HashMap<String, u64>,
    log: Vec<RegisterWrite>,
}

/// A running register on a local port, stopped on drop.
pub struct FencedRegister {
    address: String,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl FencedRegister {
    /// Starts a register for groups of `max_leaders` slots.
    pub async fn start(max_leaders: u32) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                tokio::spawn(serve(connection, shared.clone(), max_leaders));
            }
        });
        Ok(FencedRegister { address, state, task })
    }

    /// host:port, for the candidates.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Every write so far, in the order decided.
    pub fn log(&self) -> Vec<RegisterWrite> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).log.clone()
    }
}

impl Drop for FencedRegister {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `W <key> <holder> <fence>` lines with `OK` or `STALE <highest>`.
async fn serve(connection: TcpStream, state: Arc<Mutex<State>>, max_leaders: u32) {
    let mut connection = BufReader::new(connection);
    let mut line = String::new();
    loop {
        line.clear();
        if connection.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let reply = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["W", key, holder, fence] => match fence.parse::<u64>() {
                Ok(fence) => decide(&state, key, holder, fence, max_leaders),
                Err(_) => format!("ERR fence `{fence}` is not a number\n"),
            },
            _ => format!("ERR expected `W <key> <holder> <fence>`, got `{}`\n", line.trim()),
        };
        if connection.get_mut().write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn decide(state: &Mutex<State>, key: &str, holder: &str, fence: u64, max_leaders: u32) -> String {
    let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
    let highest = state.highest.entry(key.to_owned()).or_default();
    let accepted = max_leaders > 1 || fence >= *highest;
    let reply = if accepted { "OK\n".to_owned() } else { format!("STALE {highest}\n") };
    *highest = (*highest).max(fence);
    let write = RegisterWrite {
        at: now_micros(),
        key: key.to_owned(),
        holder: holder.to_owned(),
        fence,
        accepted,
    };
    state.log.push(write);
    reply
}
