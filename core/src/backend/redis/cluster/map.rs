//! The slot map: which master serves each of the 16,384 hash slots, read
//! from `CLUSTER SLOTS`, and the slot of a key.

use crate::error::{Error, Result};
use ::redis::Value;

pub(crate) const SLOTS: usize = 16_384;
pub(crate) const NO_NODE: u16 = u16::MAX;
/// Where one item goes in a round.
#[derive(Clone, Debug)]
pub(crate) enum Route {
    Slot,
    Moved(String),
    Ask(String),
}

#[derive(Clone)]
pub(crate) struct SlotMap {
    /// Node index per slot, or [`NO_NODE`].
    pub(crate) owner: Vec<u16>,
    pub(crate) nodes: Vec<String>,
    pub(crate) stale: bool,
}

impl SlotMap {
    pub(crate) fn empty() -> Self {
        SlotMap {
            owner: vec![NO_NODE; SLOTS],
            nodes: Vec::new(),
            stale: true,
        }
    }

    pub(crate) fn node_of(&self, slot: u16) -> Option<&str> {
        let i = *self.owner.get(usize::from(slot))?;
        self.nodes.get(usize::from(i)).map(String::as_str)
    }

    pub(crate) fn set(&mut self, slot: u16, addr: &str) {
        let i = match self.nodes.iter().position(|n| n == addr) {
            Some(i) => i,
            None => {
                self.nodes.push(addr.to_owned());
                self.nodes.len() - 1
            }
        };
        if let Some(o) = self.owner.get_mut(usize::from(slot)) {
            *o = u16::try_from(i).unwrap_or(NO_NODE);
        }
    }

    /// The nodes that own at least one slot.
    pub(crate) fn masters(&self) -> Vec<String> {
        let mut used = vec![false; self.nodes.len()];
        for &o in &self.owner {
            if let Some(u) = used.get_mut(usize::from(o)) {
                *u = true;
            }
        }
        self.nodes
            .iter()
            .zip(used)
            .filter(|(_, u)| *u)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

pub(crate) enum Redirect {
    To(Route),
    AsEval,
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, if not empty) or of the whole
/// key, mod 16384. The redis crate computes it too, but keeps the number
/// crate-private; the integration tests check this against the server's
/// `CLUSTER KEYSLOT`.
pub fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// The slot map in a `CLUSTER SLOTS` reply from `addr`.
pub(crate) fn slot_map_from(reply: Value, addr: &str) -> Result<SlotMap> {
    let host_of_asked = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let mut map = SlotMap::empty();
    let Value::Array(ranges) = reply else {
        return Err(Error::Backend(format!(
            "Redis Cluster node {addr} sent an unexpected CLUSTER SLOTS reply"
        )));
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) if !h.is_empty() && h.as_slice() != b"?" => {
                String::from_utf8_lossy(h).into_owned()
            }
            _ => host_of_asked.to_owned(),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let node = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        for slot in *start..=*end {
            if let Ok(slot) = u16::try_from(slot) {
                map.set(slot, &node);
            }
        }
    }
    if map.owner.iter().all(|&o| o == NO_NODE) {
        return Err(Error::Backend(format!(
            "Redis Cluster node {addr} serves no slots (is the cluster set up?)"
        )));
    }
    map.stale = false;
    Ok(map)
}
