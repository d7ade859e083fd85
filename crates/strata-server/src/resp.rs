//! The Redis serialization protocol (RESP2 and RESP3): parsing requests and encoding replies.
//!
//! A request is an array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) or an inline
//! command (`GET k\r\n`, as typed into telnet). The parser is incremental: given the bytes
//! received so far it returns a complete command and how many bytes it used, asks for more,
//! or reports a protocol error. It never panics and never allocates more than the limits
//! allow, whatever the bytes.

#![deny(clippy::indexing_slicing)]

/// Limits on what a client may send.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest bulk string accepted.
    pub max_bulk_bytes: usize,
    /// Most arguments in one command.
    pub max_args: usize,
    /// Longest inline command line.
    pub max_inline_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_bytes: 512 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline_bytes: 64 * 1024,
        }
    }
}

/// A request that cannot be parsed; the connection is answered with an error and closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// The outcome of parsing from the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole command, which took this many bytes; its arguments are in the [`Args`].
    Command(usize),
    /// The buffer holds only part of a command.
    Incomplete,
}

/// Memory an emptied [`Args`] keeps: enough for a round's batch of ordinary commands.
const KEEP_BYTES: usize = 1 << 20;
const KEEP_ARGS: usize = 4096;

/// The arguments of one command, end to end in one buffer. A connection parses every
/// command into the same `Args`, so that a command costs no allocation of its own.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Args {
    bytes: Vec<u8>,
    /// Where each argument ends in `bytes`; it starts where the one before ends.
    ends: Vec<usize>,
}

impl Args {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Argument `i`, if there are that many.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or_default(),
            None => 0,
        };
        self.bytes.get(start..end)
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + Clone {
        (0..self.len()).map(|i| self.get(i).unwrap_or_default())
    }

    /// Empties it, keeping its memory for the next command, unless an unusually large
    /// command made it large.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.bytes.shrink_to(KEEP_BYTES);
        self.ends.shrink_to(KEEP_ARGS);
    }

    pub fn push(&mut self, arg: &[u8]) {
        self.bytes.extend_from_slice(arg);
        self.ends.push(self.bytes.len());
    }

    /// Appends an argument that `write` appends to the buffer it is given.
    pub fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.bytes);
        self.ends.push(self.bytes.len());
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|p| p + from)
}

fn parse_int(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Parses one command from the start of `buf` into `args` (whose earlier contents go).
/// Unless the result is [`Parsed::Command`], what `args` holds is unspecified.
pub fn parse(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<Parsed, ProtocolError> {
    args.clear();
    match buf.first() {
        None => Ok(Parsed::Incomplete),
        Some(b'*') => parse_array(buf, limits, args),
        Some(_) => parse_inline(buf, limits, args),
    }
}

fn parse_array(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<Parsed, ProtocolError> {
    let Some(end) = find_crlf(buf, 1) else {
        if buf.len() > 32 {
            return Err(ProtocolError("invalid multibulk length".into()));
        }
        return Ok(Parsed::Incomplete);
    };
    let count = parse_int(buf.get(1..end).unwrap_or_default())
        .ok_or_else(|| ProtocolError("invalid multibulk length".into()))?;
    if count > limits.max_args as i64 {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let mut pos = end + 2;
    if count <= 0 {
        return Ok(Parsed::Command(pos));
    }
    for _ in 0..count {
        match buf.get(pos) {
            None => return Ok(Parsed::Incomplete),
            Some(b'$') => {}
            Some(&c) => {
                return Err(ProtocolError(format!(
                    "expected '$', got '{}'",
                    c.escape_ascii()
                )));
            }
        }
        let Some(end) = find_crlf(buf, pos + 1) else {
            if buf.len() - pos > 32 {
                return Err(ProtocolError("invalid bulk length".into()));
            }
            return Ok(Parsed::Incomplete);
        };
        let len = parse_int(buf.get(pos + 1..end).unwrap_or_default())
            .filter(|&n| n >= 0)
            .ok_or_else(|| ProtocolError("invalid bulk length".into()))? as u64;
        if len > limits.max_bulk_bytes as u64 {
            // Redis's words for a length over `proto-max-bulk-len`.
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let start = end + 2;
        let stop = start + len as usize;
        if buf.len() < stop + 2 {
            return Ok(Parsed::Incomplete);
        }
        if buf.get(stop..stop + 2) != Some(b"\r\n") {
            return Err(ProtocolError("bulk string not followed by CRLF".into()));
        }
        args.push(buf.get(start..stop).unwrap_or_default());
        pos = stop + 2;
    }
    Ok(Parsed::Command(pos))
}

fn parse_inline(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<Parsed, ProtocolError> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline_bytes {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(Parsed::Incomplete);
    };
    let line = buf.get(..end).unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    split_inline(line, args)?;
    Ok(Parsed::Command(end + 1))
}

/// Splits an inline command, honouring double and single quotes as redis-cli does.
fn split_inline(line: &[u8], args: &mut Args) -> Result<(), ProtocolError> {
    let mut arg = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while line.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        let Some(&first) = line.get(i) else { break };
        arg.clear();
        if first == b'"' || first == b'\'' {
            i += 1;
            loop {
                match line.get(i) {
                    None => return Err(ProtocolError("unbalanced quotes in request".into())),
                    Some(&c) if c == first => {
                        i += 1;
                        // A closing quote must end the argument, as redis-cli and Redis
                        // split lines: `"a"b` is not one argument.
                        if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                            return Err(ProtocolError("unbalanced quotes in request".into()));
                        }
                        break;
                    }
                    Some(b'\\') if first == b'"' => {
                        let esc = line.get(i + 1).copied().unwrap_or(b'\\');
                        // `\xHH`, as Redis reads it: a byte in hex.
                        let hex = line
                            .get(i + 2..i + 4)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                            .and_then(|h| u8::from_str_radix(h, 16).ok());
                        if let (b'x', Some(byte)) = (esc, hex) {
                            arg.push(byte);
                            i += 4;
                            continue;
                        }
                        arg.push(match esc {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            other => other,
                        });
                        i += 2;
                    }
                    Some(&c) => {
                        arg.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while let Some(&c) = line.get(i) {
                if c.is_ascii_whitespace() {
                    break;
                }
                arg.push(c);
                i += 1;
            }
        }
        args.push(&arg);
    }
    Ok(())
}

/// Appends replies to an output buffer, in the protocol the connection chose with HELLO: RESP2
/// or RESP3, whose nulls, maps, sets, doubles and verbatim strings have types of their own.
pub struct Reply<'a> {
    out: &'a mut Vec<u8>,
    resp3: bool,
}

impl<'a> Reply<'a> {
    /// Replies in RESP3 when `protocol` is 3, in RESP2 otherwise.
    pub fn new(out: &'a mut Vec<u8>, protocol: u8) -> Self {
        Reply {
            out,
            resp3: protocol == 3,
        }
    }

    /// Replies from here on in RESP3 when `protocol` is 3 (HELLO answers in the protocol
    /// it switches to).
    pub fn protocol(&mut self, protocol: u8) {
        self.resp3 = protocol == 3;
    }

    pub fn is_resp3(&self) -> bool {
        self.resp3
    }

    /// Appends replies already encoded (in this reply's protocol).
    pub fn raw(&mut self, encoded: &[u8]) {
        self.out.extend_from_slice(encoded);
    }

    fn line(&mut self, tag: u8, n: impl std::fmt::Display) {
        use std::io::Write as _;
        self.out.push(tag);
        let _ = write!(self.out, "{n}\r\n");
    }

    /// As [`Reply::line`] for a count or length, written out without the formatter: every
    /// bulk string and array header of a long reply passes here.
    fn count_line(&mut self, tag: u8, n: usize) {
        // usize::MAX has 20 digits.
        let mut digits = [0u8; 20];
        let mut len = 0;
        let mut rest = n;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (rest % 10) as u8;
            len += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.out.push(tag);
        self.out
            .extend_from_slice(digits.get(digits.len() - len..).unwrap_or_default());
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn simple(&mut self, s: &str) {
        self.out.push(b'+');
        self.out.extend_from_slice(s.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// An error reply; `msg` starts with the error code (`ERR`, `WRONGTYPE`, ...).
    pub fn error(&mut self, msg: &str) {
        self.out.push(b'-');
        // An error line must not hold a line break.
        for &b in msg.as_bytes() {
            self.out
                .push(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        self.out.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, n: i64) {
        self.line(b':', n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.count_line(b'$', b.len());
        self.out.extend_from_slice(b);
        self.out.extend_from_slice(b"\r\n");
    }

    /// A missing value: RESP2's null bulk string, RESP3's null.
    pub fn null(&mut self) {
        if self.resp3 {
            self.out.extend_from_slice(b"_\r\n");
        } else {
            self.out.extend_from_slice(b"$-1\r\n");
        }
    }

    /// A missing array: RESP2's null array, RESP3's null.
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.out.extend_from_slice(b"_\r\n");
        } else {
            self.out.extend_from_slice(b"*-1\r\n");
        }
    }

    pub fn array(&mut self, n: usize) {
        self.count_line(b'*', n);
    }

    /// An out-of-band message of `n` items (pub/sub): RESP3's push, RESP2's array.
    pub fn push(&mut self, n: usize) {
        self.line(if self.resp3 { b'>' } else { b'*' }, n);
    }

    /// A map of `n` pairs; in RESP2 an array of `2n` items, key then value.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.line(b'%', n);
        } else {
            self.line(b'*', 2 * n);
        }
    }

    /// A set of `n` items; in RESP2 an array.
    pub fn set(&mut self, n: usize) {
        self.line(if self.resp3 { b'~' } else { b'*' }, n);
    }

    /// A floating-point number, formatted as Redis formats it; in RESP2 a bulk string.
    pub fn double(&mut self, text: &str) {
        if self.resp3 {
            self.line(b',', text);
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// Text to show as it is (INFO, CLIENT LIST); in RESP2 a bulk string.
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.line(b'=', text.len() + 4);
            self.out.extend_from_slice(b"txt:");
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// An error reply from bytes a script made (`{err=...}`), with line breaks made spaces.
    pub fn error_bytes(&mut self, msg: &[u8]) {
        self.error(&String::from_utf8_lossy(msg));
    }

    /// A status reply from bytes a script made (`{ok=...}`), with line breaks made spaces.
    pub fn simple_bytes(&mut self, s: &[u8]) {
        let text: String = String::from_utf8_lossy(s)
            .chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
            .collect();
        self.simple(&text);
    }

    /// A boolean: RESP3's `#t`/`#f`; in RESP2 1 or a null.
    pub fn boolean(&mut self, b: bool) {
        match (self.resp3, b) {
            (true, true) => self.out.extend_from_slice(b"#t\r\n"),
            (true, false) => self.out.extend_from_slice(b"#f\r\n"),
            (false, true) => self.int(1),
            (false, false) => self.null(),
        }
    }

    /// A big number given as its digits: RESP3's `(`; in RESP2 a bulk string.
    pub fn big_number(&mut self, digits: &[u8]) {
        if self.resp3 {
            self.out.push(b'(');
            self.out.extend_from_slice(digits);
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(digits);
        }
    }

    pub fn ok(&mut self) {
        self.simple("OK");
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn parse(buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        super::parse(buf, limits, &mut Args::default())
    }

    fn cmd(buf: &[u8]) -> Vec<Vec<u8>> {
        let mut args = Args::default();
        match super::parse(buf, &Limits::default(), &mut args).unwrap() {
            Parsed::Command(n) => {
                assert_eq!(n, buf.len());
                args.iter().map(<[u8]>::to_vec).collect()
            }
            Parsed::Incomplete => panic!("incomplete"),
        }
    }

    #[test]
    fn lengths_are_written_as_the_formatter_writes_them() {
        for n in [0usize, 1, 9, 10, 99, 100, 12345, usize::MAX] {
            let mut out = Vec::new();
            let mut r = Reply::new(&mut out, 2);
            r.array(n);
            assert_eq!(out, format!("*{n}\r\n").into_bytes());
        }
        let mut out = Vec::new();
        Reply::new(&mut out, 2).bulk(b"0123456789ab");
        assert_eq!(out, b"$12\r\n0123456789ab\r\n");
    }

    #[test]
    fn parses_arrays_and_inline_commands() {
        assert_eq!(
            cmd(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
            vec![b"GET".to_vec(), b"k".to_vec()]
        );
        assert_eq!(cmd(b"*1\r\n$0\r\n\r\n"), vec![Vec::<u8>::new()]);
        assert_eq!(
            cmd(b"SET k \"a b\\n\"\r\n"),
            vec![b"SET".to_vec(), b"k".to_vec(), b"a b\n".to_vec()]
        );
        assert_eq!(cmd(b"PING\n"), vec![b"PING".to_vec()]);
        assert_eq!(
            cmd(b"SET k \"\\xff\\x00z\\xg\"\r\n"),
            vec![b"SET".to_vec(), b"k".to_vec(), b"\xff\x00zxg".to_vec()]
        );
    }

    #[test]
    fn one_args_holds_each_command_in_turn() {
        let mut args = Args::default();
        let l = Limits::default();
        let two = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let Ok(Parsed::Command(n)) = super::parse(two, &l, &mut args) else {
            panic!("the first command is whole");
        };
        assert_eq!(
            args.iter().collect::<Vec<_>>(),
            [&b"SET"[..], b"hello", b""]
        );
        assert_eq!(
            super::parse(&two[n..], &l, &mut args),
            Ok(Parsed::Command(two.len() - n))
        );
        assert_eq!(args.len(), 2);
        assert_eq!(
            (args.get(0), args.get(1), args.get(2)),
            (Some(&b"GET"[..]), Some(&b"k"[..]), None)
        );
        assert_eq!(
            super::parse(b"ECHO 'a b'\r\n", &l, &mut args),
            Ok(Parsed::Command(12))
        );
        assert_eq!(args.iter().collect::<Vec<_>>(), [&b"ECHO"[..], b"a b"]);
    }

    #[test]
    fn a_large_command_does_not_leave_its_memory_behind() {
        let mut args = Args::default();
        let big = vec![b'x'; 8 << 20];
        args.push(&big);
        for _ in 0..10_000 {
            args.push(b"k");
        }
        args.clear();
        assert!(args.bytes.capacity() <= KEEP_BYTES && args.ends.capacity() <= KEEP_ARGS);
        args.push(b"small");
        args.clear();
        assert!(
            args.bytes.capacity() >= 5,
            "small commands keep their memory"
        );
    }

    #[test]
    fn every_prefix_of_a_command_is_incomplete() {
        let full = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$5\r\nworld\r\n";
        for cut in 0..full.len() {
            assert_eq!(
                parse(&full[..cut], &Limits::default()).unwrap(),
                Parsed::Incomplete,
                "cut {cut}"
            );
        }
    }

    #[test]
    fn malformed_input_is_an_error() {
        let l = Limits::default();
        assert!(parse(b"*x\r\n", &l).is_err());
        assert!(parse(b"*1\r\n:5\r\n", &l).is_err());
        assert!(parse(b"*1\r\n$-5\r\n", &l).is_err());
        assert!(parse(b"*1\r\n$3\r\nabcXY", &l).is_err());
        assert!(parse(b"\"unbalanced\r\n", &l).is_err());
        assert_eq!(
            parse(b"set \"\"\"k\"\"\" v\r\n", &l),
            Err(ProtocolError("unbalanced quotes in request".into()))
        );
        let small = Limits {
            max_bulk_bytes: 4,
            ..Limits::default()
        };
        assert!(
            parse(b"*1\r\n$5\r\n", &small).is_err(),
            "an oversized bulk is refused before it arrives"
        );
        let few = Limits {
            max_args: 2,
            ..Limits::default()
        };
        assert!(parse(b"*3\r\n", &few).is_err());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            let len = (x % 40) as usize;
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(b"*$\r\n0123456789-abc"[(x % 18) as usize]);
            }
            let _ = parse(&buf, &Limits::default());
        }
    }
}
