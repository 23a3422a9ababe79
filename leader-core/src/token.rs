//! Lease tokens: 128 random bits that prove who holds a slot.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The secret a slot is granted under: 128 bits from the operating system's CSPRNG (drawn
/// 64 tokens per system call; a forked child never reuses its parent's).
///
/// A candidate makes its token before its first attempt, so a retried acquire after a lost
/// reply is recognised as the same request, and nobody without the token can renew or
/// release the slot. `Debug` shows only the first 4 hex digits, so logs never carry a usable
/// token; `Display` shows all 32 (what an operator types to free a stuck slot).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(u128);

impl LeaseToken {
    /// Draws a new token from the operating system's random number generator.
    ///
    /// ```
    /// let a = leader_core::LeaseToken::generate()?;
    /// let b = leader_core::LeaseToken::generate()?;
    /// assert_ne!(a, b);
    /// assert_eq!(a.to_string().len(), 32);
    /// # Ok::<(), leader_core::Error>(())
    /// ```
    pub fn generate() -> Result<Self, Error> {
        RANDOM.with_borrow_mut(RandomBuffer::next).map(LeaseToken)
    }

    /// The token as a number, for stores that keep it in binary form.
    pub fn as_u128(&self) -> u128 {
        self.0
    }

    /// Rebuilds a token a store kept as a number.
    pub(crate) fn from_u128(value: u128) -> Self {
        LeaseToken(value)
    }
}

impl FromStr for LeaseToken {
    type Err = Error;

    /// Parses the 32 hex digits that `Display` writes.
    ///
    /// ```
    /// let token: leader_core::LeaseToken = "0000000000000000000000000000002a".parse()?;
    /// assert_eq!(token.as_u128(), 42);
    /// assert!("not-a-token".parse::<leader_core::LeaseToken>().is_err());
    /// # Ok::<(), leader_core::Error>(())
    /// ```
    fn from_str(text: &str) -> Result<Self, Error> {
        let valid = text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit());
        match u128::from_str_radix(text, 16) {
            Ok(value) if valid => Ok(LeaseToken(value)),
            _ => Err(Error::invalid_option(
                "token",
                text,
                "must be the 32 hex digits of a lease token",
            )),
        }
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken({:04x}…)", self.0 >> 112)
    }
}

/// Tokens drawn from the OS per system call.
const BATCH: usize = 64;

thread_local! {
    static RANDOM: std::cell::RefCell<RandomBuffer> = const {
        std::cell::RefCell::new(RandomBuffer { values: [0; BATCH], used: BATCH, pid: 0 })
    };
}

/// OS randomness drawn in batches, one getrandom call per [`BATCH`] tokens. Each value is
/// handed out once; a process whose id changed (a forked child) draws afresh, so it never
/// repeats a token its parent may have used.
struct RandomBuffer {
    values: [u128; BATCH],
    used: usize,
    pid: u32,
}

impl RandomBuffer {
    fn next(&mut self) -> Result<u128, Error> {
        if crate::random::is_seeded() {
            // A simulation's draws, in order: none taken from a batch drawn before.
            let mut bytes = [0u8; 16];
            crate::random::fill(&mut bytes).map_err(|e| Error::Random(std::io::Error::other(e)))?;
            return Ok(u128::from_le_bytes(bytes));
        }
        let pid = std::process::id();
        if self.used == BATCH || pid != self.pid {
            let mut bytes = [0u8; BATCH * 16];
            crate::random::fill(&mut bytes).map_err(|e| Error::Random(std::io::Error::other(e)))?;
            for (value, chunk) in self.values.iter_mut().zip(bytes.chunks_exact(16)) {
                *value = u128::from_le_bytes(chunk.try_into().expect("16 bytes"));
            }
            (self.used, self.pid) = (0, pid);
        }
        let value = std::mem::take(&mut self.values[self.used]);
        self.used += 1;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_secret() {
        let token = LeaseToken::from_u128(0xabcd_0000_0000_0000_0000_0000_1234_5678);
        assert_eq!(format!("{token:?}"), "LeaseToken(abcd…)");
        assert_eq!(token.to_string(), "abcd0000000000000000000012345678");
    }

    #[test]
    fn tokens_never_repeat_across_batches_and_threads() {
        let mut seen = std::collections::HashSet::new();
        let draw = || (0..5 * BATCH).map(|_| LeaseToken::generate().unwrap()).collect::<Vec<_>>();
        let other = std::thread::spawn(draw);
        seen.extend(draw());
        seen.extend(other.join().unwrap());
        assert_eq!(seen.len(), 10 * BATCH);
    }
}
