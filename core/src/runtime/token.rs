//! Owner tokens: 128 bits of the OS's randomness, drawn from a per-thread
//! pool that a forked child throws away.

use crate::error::{Error, Result};

/// Bytes of OS randomness fetched at once for owner tokens.
const TOKEN_POOL: usize = 4096;

struct TokenPool {
    generation: u64,
    bytes: [u8; TOKEN_POOL],
    used: usize,
}

thread_local! {
    static TOKEN_POOL_TLS: std::cell::RefCell<TokenPool> = const {
        std::cell::RefCell::new(TokenPool { generation: u64::MAX, bytes: [0; TOKEN_POOL], used: TOKEN_POOL })
    };
}

/// A fresh owner token: 128 bits from the operating system's RNG, as 32
/// lowercase hex characters.
///
/// The OS RNG is read 4 KiB at a time into a per-thread buffer (one
/// `getrandom` call per 256 tokens, instead of one per acquire); each byte
/// is used once, and a forked child throws the buffer away so it never
/// mints its parent's tokens.
pub(crate) fn mint_token() -> Result<String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let generation = crate::runtime::fork::generation();
    TOKEN_POOL_TLS.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.generation != generation || pool.used + 16 > TOKEN_POOL {
            getrandom::fill(&mut pool.bytes).map_err(|e| {
                Error::System(format!("the OS random number generator failed: {e}"))
            })?;
            pool.used = 0;
            pool.generation = generation;
        }
        let start = pool.used;
        pool.used += 16;
        let mut hex = Vec::with_capacity(32);
        for b in &pool.bytes[start..start + 16] {
            hex.push(HEX[usize::from(b >> 4)]);
            hex.push(HEX[usize::from(b & 15)]);
        }
        // Forget the bytes once used.
        pool.bytes[start..start + 16].fill(0);
        // SAFETY: only ASCII hex digits went in, which is valid UTF-8.
        Ok(unsafe { String::from_utf8_unchecked(hex) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_hex() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            // past several refills of the buffer
            let t = mint_token().unwrap();
            assert_eq!(t.len(), 32);
            assert!(t.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
            assert!(seen.insert(t));
        }
    }
}
