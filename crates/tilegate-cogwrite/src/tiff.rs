//! A small TIFF 6.0 / BigTIFF reader: header, IFD chain and raw tag values — no pixels.
//!
//! Only what the assembler needs: every IFD's entries with their values as raw bytes in the
//! file's byte order (so they can be copied unchanged into a file of the same byte order),
//! and typed accessors for the structural tags.

use std::collections::HashSet;

/// A file's byte order (TIFF 6.0 §2: `II` little-endian, `MM` big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endian {
    Little,
    Big,
}

impl Endian {
    pub(crate) fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            Self::Little => u16::from_le_bytes(a),
            Self::Big => u16::from_be_bytes(a),
        }
    }

    pub(crate) fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Self::Little => u32::from_le_bytes(a),
            Self::Big => u32::from_be_bytes(a),
        }
    }

    pub(crate) fn u64(self, b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        match self {
            Self::Little => u64::from_le_bytes(a),
            Self::Big => u64::from_be_bytes(a),
        }
    }

    pub(crate) fn put_u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        });
    }

    pub(crate) fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        });
    }

    pub(crate) fn put_u64(self, out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&match self {
            Self::Little => v.to_le_bytes(),
            Self::Big => v.to_be_bytes(),
        });
    }
}

// Field types (TIFF 6.0 §2 "Types", BigTIFF adds 16–18).
pub(crate) const BYTE: u16 = 1;
pub(crate) const ASCII: u16 = 2;
pub(crate) const SHORT: u16 = 3;
pub(crate) const LONG: u16 = 4;
pub(crate) const DOUBLE: u16 = 12;
pub(crate) const LONG8: u16 = 16;
const IFD: u16 = 13;
const SLONG8: u16 = 17;
const IFD8: u16 = 18;

/// Bytes per value of a field type, `None` for types this reader does not know (TIFF 6.0:
/// readers should skip fields of unexpected types).
pub(crate) fn type_size(typ: u16) -> Option<u64> {
    Some(match typ {
        1 | 2 | 6 | 7 => 1,
        3 | 8 => 2,
        4 | 9 | 11 | IFD => 4,
        5 | 10 | 12 | LONG8 | SLONG8 | IFD8 => 8,
        _ => return None,
    })
}

/// One directory entry with its value bytes, in the file's byte order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub tag: u16,
    pub typ: u16,
    pub count: u64,
    pub data: Vec<u8>,
}

impl Entry {
    /// The values as unsigned integers (BYTE, SHORT, LONG, LONG8 and the IFD types).
    pub(crate) fn uints(&self, e: Endian) -> Option<Vec<u64>> {
        let size = type_size(self.typ)? as usize;
        let parse: fn(Endian, &[u8]) -> u64 = match self.typ {
            BYTE => |_, b| u64::from(b[0]),
            SHORT => |e, b| u64::from(e.u16(b)),
            LONG | IFD => |e, b| u64::from(e.u32(b)),
            LONG8 | IFD8 => |e, b| e.u64(b),
            _ => return None,
        };
        Some(self.data.chunks_exact(size).map(|b| parse(e, b)).collect())
    }

    /// An ASCII value without its terminating NUL(s).
    pub(crate) fn ascii(&self) -> Option<String> {
        (self.typ == ASCII).then(|| {
            let end = self.data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            String::from_utf8_lossy(&self.data[..end]).into_owned()
        })
    }
}

/// One image file directory; entries sorted by tag.
#[derive(Debug, Clone)]
pub(crate) struct Ifd {
    pub entries: Vec<Entry>,
    /// The tags whose values lie outside the entry, in the order of their values in the file.
    pub value_order: Vec<u16>,
}

impl Ifd {
    pub(crate) fn get(&self, tag: u16) -> Option<&Entry> {
        self.entries
            .binary_search_by_key(&tag, |e| e.tag)
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// A parsed TIFF: byte order, flavour and every IFD of the chain.
#[derive(Debug, Clone)]
pub(crate) struct Tiff {
    pub endian: Endian,
    pub bigtiff: bool,
    pub ifds: Vec<Ifd>,
}

/// Why bytes could not be read as a TIFF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// No TIFF or BigTIFF signature at all.
    NotTiff,
    /// A TIFF signature, but a truncated or inconsistent structure.
    Corrupt(String),
}

/// More IFDs than any tile or COG of ours has: a guard against crafted chains.
const MAX_IFDS: usize = 256;

/// Parse the header and the whole IFD chain.
pub(crate) fn parse(b: &[u8]) -> Result<Tiff, ParseError> {
    let corrupt = |m: &str| ParseError::Corrupt(m.to_owned());
    if b.len() < 8 {
        return Err(ParseError::NotTiff);
    }
    let endian = match &b[..2] {
        b"II" => Endian::Little,
        b"MM" => Endian::Big,
        _ => return Err(ParseError::NotTiff),
    };
    // TIFF 6.0 §2: 42 after the byte-order mark; BigTIFF: 43, then offset size 8 and 0.
    let (bigtiff, mut next) = match endian.u16(&b[2..4]) {
        42 => (false, u64::from(endian.u32(&b[4..8]))),
        43 => {
            if b.len() < 16 {
                return Err(corrupt("truncated BigTIFF header"));
            }
            if endian.u16(&b[4..6]) != 8 || endian.u16(&b[6..8]) != 0 {
                return Err(corrupt("BigTIFF header with an offset size other than 8"));
            }
            (true, endian.u64(&b[8..16]))
        }
        _ => return Err(ParseError::NotTiff),
    };
    let mut ifds = Vec::new();
    let mut seen = HashSet::new();
    while next != 0 {
        if !seen.insert(next) || ifds.len() >= MAX_IFDS {
            return Err(corrupt("IFD chain loops"));
        }
        let (ifd, after) = parse_ifd(b, endian, bigtiff, next)?;
        ifds.push(ifd);
        next = after;
    }
    if ifds.is_empty() {
        return Err(corrupt("no image file directory"));
    }
    Ok(Tiff {
        endian,
        bigtiff,
        ifds,
    })
}

fn slice(b: &[u8], off: u64, len: u64) -> Result<&[u8], ParseError> {
    let end = off.checked_add(len).filter(|&e| e <= b.len() as u64);
    match end {
        Some(end) => Ok(&b[off as usize..end as usize]),
        None => Err(ParseError::Corrupt(format!(
            "{len} bytes at offset {off} lie beyond the end of the file ({} bytes)",
            b.len()
        ))),
    }
}

fn parse_ifd(b: &[u8], e: Endian, big: bool, off: u64) -> Result<(Ifd, u64), ParseError> {
    let (count_len, entry_len, inline_len) = if big { (8, 20, 8) } else { (2, 12, 4) };
    let head = slice(b, off, count_len)?;
    let n = if big {
        e.u64(head)
    } else {
        u64::from(e.u16(head))
    };
    let body = slice(b, off + count_len, n * entry_len + inline_len)?;
    let mut entries = Vec::with_capacity(n as usize);
    let mut placed: Vec<(u64, u16)> = Vec::new();
    for raw in body[..(n * entry_len) as usize].chunks_exact(entry_len as usize) {
        let tag = e.u16(&raw[0..2]);
        let typ = e.u16(&raw[2..4]);
        let count = if big {
            e.u64(&raw[4..12])
        } else {
            u64::from(e.u32(&raw[4..8]))
        };
        let value = if big { &raw[12..20] } else { &raw[8..12] };
        let Some(size) = type_size(typ) else { continue };
        let len = size
            .checked_mul(count)
            .ok_or_else(|| ParseError::Corrupt(format!("tag {tag}: count overflows")))?;
        let data = if len <= inline_len {
            value[..len as usize].to_vec()
        } else {
            let at = if big {
                e.u64(value)
            } else {
                u64::from(e.u32(value))
            };
            placed.push((at, tag));
            slice(b, at, len)
                .map_err(|err| match err {
                    ParseError::Corrupt(m) => ParseError::Corrupt(format!("tag {tag}: {m}")),
                    other => other,
                })?
                .to_vec()
        };
        entries.push(Entry {
            tag,
            typ,
            count,
            data,
        });
    }
    // TIFF 6.0 requires ascending tags; sort anyway so lookups work on sloppy writers.
    entries.sort_by_key(|x| x.tag);
    let tail = &body[(n * entry_len) as usize..];
    let next = if big {
        e.u64(tail)
    } else {
        u64::from(e.u32(tail))
    };
    placed.sort_unstable();
    let value_order = placed.into_iter().map(|(_, tag)| tag).collect();
    Ok((
        Ifd {
            entries,
            value_order,
        },
        next,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classic_le(entries: &[(u16, u16, u32, u32)]) -> Vec<u8> {
        let mut v = b"II".to_vec();
        let e = Endian::Little;
        e.put_u16(&mut v, 42);
        e.put_u32(&mut v, 8);
        e.put_u16(&mut v, entries.len() as u16);
        for &(tag, typ, count, value) in entries {
            e.put_u16(&mut v, tag);
            e.put_u16(&mut v, typ);
            e.put_u32(&mut v, count);
            e.put_u32(&mut v, value);
        }
        e.put_u32(&mut v, 0);
        v
    }

    #[test]
    fn parses_a_minimal_classic_file() {
        let b = classic_le(&[(257, SHORT, 1, 20), (256, LONG, 1, 70000)]);
        let t = parse(&b).unwrap();
        assert!(!t.bigtiff);
        assert_eq!(t.ifds.len(), 1);
        let ifd = &t.ifds[0];
        assert_eq!(ifd.get(256).unwrap().uints(t.endian), Some(vec![70000]));
        assert_eq!(ifd.get(257).unwrap().uints(t.endian), Some(vec![20]));
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert_eq!(parse(b"hello world").unwrap_err(), ParseError::NotTiff);
        assert_eq!(parse(b"II").unwrap_err(), ParseError::NotTiff);
        assert_eq!(parse(b"II\x2a\x00\xff\x00\x00\x00").unwrap_err(), {
            ParseError::Corrupt(
                "2 bytes at offset 255 lie beyond the end of the file (8 bytes)".into(),
            )
        });
        // An out-of-line value beyond the end.
        let b = classic_le(&[(324, LONG, 4, 9999)]);
        assert!(matches!(parse(&b), Err(ParseError::Corrupt(m)) if m.starts_with("tag 324")));
    }

    #[test]
    fn detects_a_looping_chain() {
        let mut b = classic_le(&[(256, SHORT, 1, 1)]);
        let n = b.len();
        b[n - 4..].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(
            parse(&b).unwrap_err(),
            ParseError::Corrupt("IFD chain loops".into())
        );
    }
}
