//! PMTiles v3 directories (spec §4.2, appendix A): entries as columns of varints — tile-ID
//! deltas, run lengths, lengths, offsets (`0` for "right after the previous entry", else
//! offset + 1) — and the gzip that `internal_compression` names.

use super::ArchiveError;

/// One directory entry: a run of tiles sharing one blob (`run_length > 0`, offset in the tile
/// data section) or a leaf directory (`run_length == 0`, offset in the leaf directories section).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tile_id: u64,
    pub offset: u64,
    pub length: u32,
    pub run_length: u32,
}

pub(crate) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, ArchiveError> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let &byte = buf.get(*pos).ok_or(ArchiveError::Corrupt {
            what: "directory ends inside a varint",
        })?;
        *pos += 1;
        if shift == 63 && byte > 1 || shift > 63 {
            return Err(ArchiveError::Corrupt {
                what: "directory varint exceeds 64 bits",
            });
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
    }
}

/// The uncompressed encoding of a directory (entries sorted by tile ID).
pub(crate) fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 6 + 8);
    write_varint(&mut out, entries.len() as u64);
    let mut last_id = 0;
    for e in entries {
        write_varint(&mut out, e.tile_id - last_id);
        last_id = e.tile_id;
    }
    for e in entries {
        write_varint(&mut out, u64::from(e.run_length));
    }
    for e in entries {
        write_varint(&mut out, u64::from(e.length));
    }
    let mut next_byte = 0;
    for (i, e) in entries.iter().enumerate() {
        if i > 0 && e.offset == next_byte {
            write_varint(&mut out, 0);
        } else {
            write_varint(&mut out, e.offset + 1);
        }
        next_byte = e.offset + u64::from(e.length);
    }
    out
}

/// Decodes an uncompressed directory.
pub(crate) fn decode(buf: &[u8]) -> Result<Vec<Entry>, ArchiveError> {
    let corrupt = |what| ArchiveError::Corrupt { what };
    let mut pos = 0;
    let n = read_varint(buf, &mut pos)?;
    // Each entry takes at least four bytes: refuse counts the buffer cannot hold.
    if n == 0 || n > buf.len() as u64 / 4 + 1 {
        return Err(corrupt(
            "directory entry count is zero or larger than the directory",
        ));
    }
    let n = n as usize;
    let mut entries = Vec::with_capacity(n);
    let mut last_id = 0u64;
    for _ in 0..n {
        last_id = last_id
            .checked_add(read_varint(buf, &mut pos)?)
            .ok_or(corrupt("directory tile ID overflows"))?;
        entries.push(Entry {
            tile_id: last_id,
            offset: 0,
            length: 0,
            run_length: 0,
        });
    }
    for e in &mut entries {
        e.run_length = u32::try_from(read_varint(buf, &mut pos)?)
            .map_err(|_| corrupt("directory run length exceeds 32 bits"))?;
    }
    for e in &mut entries {
        e.length = u32::try_from(read_varint(buf, &mut pos)?)
            .map_err(|_| corrupt("directory length exceeds 32 bits"))?;
        if e.length == 0 {
            return Err(corrupt("directory entry has length 0"));
        }
    }
    for i in 0..n {
        let v = read_varint(buf, &mut pos)?;
        entries[i].offset = if v == 0 && i > 0 {
            entries[i - 1].offset + u64::from(entries[i - 1].length)
        } else if v == 0 {
            return Err(corrupt("first directory entry has offset code 0"));
        } else {
            v - 1
        };
    }
    Ok(entries)
}

pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    let mut out = vec![0; c.gzip_compress_bound(data.len())];
    let n = c
        .gzip_compress(data, &mut out)
        .expect("the buffer is gzip_compress_bound long");
    out.truncate(n);
    out
}

/// The largest decompressed directory or metadata the reader accepts (a gzip member states its
/// own size; this bounds what a corrupt or hostile archive can make it allocate).
const MAX_INFLATED: usize = 256 << 20;

pub(crate) fn gunzip(data: &[u8]) -> Result<Vec<u8>, ArchiveError> {
    // RFC 1952: a member ends with ISIZE, the input's length modulo 2^32.
    let Some(isize) = data.len().checked_sub(4).map(|at| &data[at..]) else {
        return Err(ArchiveError::Corrupt {
            what: "gzip member is shorter than its trailer",
        });
    };
    let size = u32::from_le_bytes(isize.try_into().expect("four bytes")) as usize;
    if size > MAX_INFLATED {
        return Err(ArchiveError::Corrupt {
            what: "gzip member inflates past the reader's limit",
        });
    }
    let mut out = vec![0; size];
    let n = libdeflater::Decompressor::new()
        .gzip_decompress(data, &mut out)
        .map_err(|_| ArchiveError::Corrupt {
            what: "gzip member does not inflate",
        })?;
    out.truncate(n);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tile_id: u64, offset: u64, length: u32, run_length: u32) -> Entry {
        Entry {
            tile_id,
            offset,
            length,
            run_length,
        }
    }

    #[test]
    fn varints_are_protobuf_varints() {
        for (v, bytes) in [
            (0u64, vec![0u8]),
            (1, vec![1]),
            (127, vec![0x7f]),
            (128, vec![0x80, 0x01]),
            (300, vec![0xac, 0x02]),
            (
                u64::MAX,
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos).unwrap(), v);
            assert_eq!(pos, out.len());
        }
        let mut pos = 0;
        assert!(read_varint(&[0xff; 11], &mut pos).is_err());
    }

    /// Byte for byte: count, ID deltas, run lengths, lengths, then offsets where a contiguous
    /// entry is 0 and any other is offset + 1 (the first always offset + 1, even at 0).
    #[test]
    fn encoding_is_the_specs() {
        let entries = [
            entry(5, 0, 10, 1),
            entry(6, 10, 20, 2),
            entry(42, 0, 10, 1),
            entry(200, 30, 3, 1),
        ];
        let bytes = encode(&entries);
        assert_eq!(
            bytes,
            [
                4, // count
                5, 1, 36, 158, 1, // ID deltas: 5, 1, 36, 158
                1, 2, 1, 1, // run lengths
                10, 20, 10, 3, // lengths
                1, 0, 1,
                31, // offsets: 0+1, contiguous, 0+1 (a repeat), 30+1 (after the repeat)
            ]
        );
        assert_eq!(decode(&bytes).unwrap(), entries);
    }

    #[test]
    fn corrupt_directories_are_refused() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0]).is_err());
        assert!(decode(&[1, 0, 1]).is_err());
        assert!(decode(&[1, 0, 1, 0, 1]).is_err(), "length 0");
        assert!(decode(&[1, 0, 1, 1, 0]).is_err(), "first offset code 0");
        assert!(
            decode(&[200, 1, 0, 1, 1, 1]).is_err(),
            "count past the buffer"
        );
    }

    #[test]
    fn gzip_round_trip() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let gz = gzip(&data);
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        assert_eq!(gunzip(&gz).unwrap(), data);
        assert!(gunzip(&gz[..gz.len() - 1]).is_err());
        assert!(gunzip(&[1, 2]).is_err());
    }
}
