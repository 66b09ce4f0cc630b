//! RESP commands written straight into a reused buffer: the hot paths
//! (acquire, renew, release, a heartbeat's pipeline of any size) build no
//! per-argument objects and format no key strings; a namespaced key is
//! written in place as the bulk string `NS:kind:{KEY}`.

/// A writer of RESP commands onto the end of `buf`.
pub(crate) struct Resp<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Resp<'a> {
    /// A writer that appends to `buf` (clear it first for a new batch).
    pub(crate) fn new(buf: &'a mut Vec<u8>) -> Self {
        Resp { buf }
    }

    /// The header of a command of `n` arguments (the verb included).
    pub(crate) fn command(&mut self, n: usize) -> &mut Self {
        self.buf.push(b'*');
        self.decimal(n as u64);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// A bulk string argument.
    pub(crate) fn bulk(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.push(b'$');
        self.decimal(bytes.len() as u64);
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// A whole number argument, in decimal.
    pub(crate) fn int(&mut self, n: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let text = decimal(n, &mut digits);
        self.bulk(text)
    }

    /// The key `NS:kind:{KEY}` (the braces literal: a hash tag).
    pub(crate) fn key(&mut self, namespace: &str, kind: &str, key: &str) -> &mut Self {
        self.key_then(namespace, kind, key, "")
    }

    /// `NS:kind:{KEY}` followed by `tail` (a channel prefix such as
    /// `NS:next:{KEY}:`).
    pub(crate) fn key_then(
        &mut self,
        namespace: &str,
        kind: &str,
        key: &str,
        tail: &str,
    ) -> &mut Self {
        let len = namespace.len() + kind.len() + key.len() + 4 + tail.len();
        self.buf.push(b'$');
        self.decimal(len as u64);
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(namespace.as_bytes());
        self.buf.push(b':');
        self.buf.extend_from_slice(kind.as_bytes());
        self.buf.extend_from_slice(b":{");
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.push(b'}');
        self.buf.extend_from_slice(tail.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    /// The head of `EVALSHA sha numkeys` (or `EVAL source numkeys` with
    /// `source`) for a script call of `keys` keys and `args` arguments.
    pub(crate) fn eval(
        &mut self,
        sha: &str,
        source: Option<&str>,
        keys: usize,
        args: usize,
    ) -> &mut Self {
        self.command(3 + keys + args);
        match source {
            None => self.bulk(b"EVALSHA").bulk(sha.as_bytes()),
            Some(source) => self.bulk(b"EVAL").bulk(source.as_bytes()),
        };
        self.int(keys as u64)
    }

    fn decimal(&mut self, n: u64) {
        let mut digits = [0u8; 20];
        let text = decimal(n, &mut digits);
        self.buf.extend_from_slice(text);
    }
}

/// `n` in decimal, written at the end of `digits`.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_the_resp_of_their_arguments() {
        let mut buf = Vec::new();
        Resp::new(&mut buf)
            .eval("abc", None, 1, 2)
            .key("ns", "lease", "k}")
            .bulk(b"tok")
            .int(0);
        Resp::new(&mut buf)
            .command(2)
            .bulk(b"EXISTS")
            .int(18446744073709551615);
        let expected = ::redis::pipe()
            .cmd("EVALSHA")
            .arg("abc")
            .arg(1)
            .arg(super::super::keys::key_of("ns", "lease", "k}"))
            .arg("tok")
            .arg(0)
            .cmd("EXISTS")
            .arg(u64::MAX)
            .get_packed_pipeline();
        assert_eq!(
            String::from_utf8_lossy(&buf),
            String::from_utf8_lossy(&expected)
        );
        buf.clear();
        Resp::new(&mut buf).eval("sha", Some("return 1"), 0, 0);
        assert_eq!(buf, b"*3\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n0\r\n");
    }
}
