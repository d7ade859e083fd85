//! All byte encoding of the engine: little-endian fixed-width integers, LEB128 varints and
//! length-prefixed slices. Decoders never panic: short or malformed input is a [`DecodeError`].

use crate::error::DecodeError;

pub(crate) fn put_u32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_varint(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

pub(crate) fn put_len_prefixed(dst: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(dst, bytes.len() as u64);
    dst.extend_from_slice(bytes);
}

pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Reads a little-endian `u32` at `pos`.
pub(crate) fn u32_at(src: &[u8], pos: usize) -> Result<u32, DecodeError> {
    let bytes = src
        .get(pos..pos.checked_add(4).ok_or(DecodeError("offset overflow"))?)
        .ok_or(DecodeError("truncated u32"))?;
    let mut a = [0u8; 4];
    a.copy_from_slice(bytes);
    Ok(u32::from_le_bytes(a))
}

/// Reads a little-endian `u64` at `pos`.
pub(crate) fn u64_at(src: &[u8], pos: usize) -> Result<u64, DecodeError> {
    let bytes = src
        .get(pos..pos.checked_add(8).ok_or(DecodeError("offset overflow"))?)
        .ok_or(DecodeError("truncated u64"))?;
    let mut a = [0u8; 8];
    a.copy_from_slice(bytes);
    Ok(u64::from_le_bytes(a))
}

/// A forward cursor over an encoded buffer.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(DecodeError("truncated byte"))?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let v = u32_at(self.buf, self.pos)?;
        self.pos += 4;
        Ok(v)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let v = u64_at(self.buf, self.pos)?;
        self.pos += 8;
        Ok(v)
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        // One byte, the common case for lengths.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.varint_long()
    }

    #[inline(never)]
    fn varint_long(&mut self) -> Result<u64, DecodeError> {
        let mut result = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            result |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    return Err(DecodeError("varint overflows u64"));
                }
                return Ok(result);
            }
        }
        Err(DecodeError("varint too long"))
    }

    #[inline]
    pub(crate) fn varint_usize(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.varint()?).map_err(|_| DecodeError("length overflows usize"))
    }

    /// The next `n` bytes, if there are that many, without moving past them.
    #[inline]
    pub(crate) fn peek(&self, n: usize) -> Option<&'a [u8]> {
        self.buf.get(self.pos..self.pos.checked_add(n)?)
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(DecodeError("length overflow"))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(DecodeError("truncated bytes"))?;
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn len_prefixed(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint_usize()?;
        self.bytes(n)
    }
}

/// CRC32C of `parts` concatenated, masked as LevelDB does so that a CRC stored inside data
/// that is itself checksummed does not produce trivially matching values.
/// True when a stored checksum equals the one computed. Built with the feature
/// `fuzz-skip-checksums`, which only the fuzz targets turn on, every checksum passes, so that
/// fuzzing reaches the decoders behind the checks instead of stopping at them.
#[inline]
pub(crate) fn checksum_ok(computed: u32, stored: u32) -> bool {
    cfg!(feature = "fuzz-skip-checksums") || computed == stored
}

pub(crate) fn masked_crc(parts: &[&[u8]]) -> u32 {
    let mut crc = 0u32;
    for p in parts {
        crc = crc32c::crc32c_append(crc, p);
    }
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trips_at_every_width() {
        let values = [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ];
        for v in values {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v));
            let mut r = Reader::new(&buf);
            assert_eq!(r.varint().unwrap(), v);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        put_varint(&mut buf, u64::MAX);
        buf.pop();
        assert!(Reader::new(&buf).varint().is_err());
        assert!(Reader::new(&[0x80; 11]).varint().is_err());
        assert!(Reader::new(&[1, 2, 3]).u32().is_err());
        assert!(Reader::new(&[5, 1]).len_prefixed().is_err());
        assert!(u64_at(&[0; 8], usize::MAX - 2).is_err());
    }

    #[test]
    fn fixed_and_slices_round_trip() {
        let mut buf = Vec::new();
        put_u32(&mut buf, 0xdead_beef);
        put_u64(&mut buf, 42);
        put_len_prefixed(&mut buf, b"hello");
        let mut r = Reader::new(&buf);
        assert_eq!(r.u32().unwrap(), 0xdead_beef);
        assert_eq!(r.u64().unwrap(), 42);
        assert_eq!(r.len_prefixed().unwrap(), b"hello");
        assert!(r.is_empty());
    }

    #[test]
    fn masked_crc_differs_from_plain_and_covers_all_parts() {
        let a = masked_crc(&[b"ab", b"c"]);
        assert_eq!(a, masked_crc(&[b"abc"]));
        assert_ne!(a, crc32c::crc32c(b"abc"));
        assert_ne!(a, masked_crc(&[b"abd"]));
    }
}
