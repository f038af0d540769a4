//! Writes the COG byte layout that GDAL's validator checks and that makes GDAL report
//! `LAYOUT=COG` (GDAL COG driver docs, "File format details"):
//!
//! 1. the TIFF or BigTIFF header, whose first IFD offset points just past
//! 2. GDAL's "ghost area": `GDAL_STRUCTURAL_METADATA_SIZE=nnnnnn bytes\n` and the declarations
//!    `LAYOUT=IFDS_BEFORE_DATA`, `BLOCK_ORDER=ROW_MAJOR`, `BLOCK_LEADER=SIZE_AS_UINT4`,
//!    `BLOCK_TRAILER=LAST_4_BYTES_REPEATED`, `KNOWN_INCOMPATIBLE_EDITION=NO`; the IFD starts at
//!    the next even offset (TIFF 6.0: IFDs begin on a word boundary);
//! 3. every IFD — full resolution first, then overviews, largest first — each followed by its
//!    out-of-line tag values;
//! 4. the block data: smallest overview first, full resolution last, blocks of a level in TIFF
//!    order (row-major; plane by plane for PlanarConfiguration=2), each block preceded by its
//!    byte count as a little-endian u32 and followed by a repeat of its last 4 bytes.
//!
//! Classic TIFF offsets are 32-bit, so the file is classic exactly when its final size, known
//! before a byte is written, is below 4 GiB; otherwise BigTIFF (LONG8 offsets, 8-byte counts
//! and IFD links).

use crate::tiff::{Endian, Entry, LONG, LONG8, SHORT, type_size};
use crate::tile::{TILE_BYTE_COUNTS, TILE_OFFSETS};
use bytes::Bytes;
use rayon::prelude::*;

/// The ghost area's declarations, byte for byte what GDAL 3.6 writes (its trailing space is
/// GDAL's padding too).
const GHOST_BODY: &str = "LAYOUT=IFDS_BEFORE_DATA\nBLOCK_ORDER=ROW_MAJOR\nBLOCK_LEADER=SIZE_AS_UINT4\nBLOCK_TRAILER=LAST_4_BYTES_REPEATED\nKNOWN_INCOMPATIBLE_EDITION=NO\n ";

fn ghost_area() -> String {
    format!(
        "GDAL_STRUCTURAL_METADATA_SIZE={:06} bytes\n{GHOST_BODY}",
        GHOST_BODY.len()
    )
}

/// One IFD to write: its entries (without TileOffsets/TileByteCounts, which the writer adds)
/// and its blocks in TIFF order. An empty block is sparse: offset 0, count 0, no bytes.
pub(crate) struct IfdOut {
    pub entries: Vec<Entry>,
    pub blocks: Vec<Bytes>,
    /// Tags whose out-of-line values go first, in this order (the rest follow by tag): to lay
    /// a tile out as the GDAL-written tile it copies (libtiff writes custom tags' values after
    /// the baseline ones). Empty: by tag.
    pub value_order: Vec<u16>,
}

/// The order in which `entries`' out-of-line values are written: indices into `entries`.
fn value_sequence(entries: &[Entry], order: &[u16]) -> Vec<usize> {
    let rank = |tag: u16| order.iter().position(|&t| t == tag).unwrap_or(order.len());
    let mut idx: Vec<usize> = (0..entries.len()).collect();
    idx.sort_by_key(|&i| (rank(entries[i].tag), entries[i].tag));
    idx
}

/// Leader and trailer bytes around each block.
const LEADER: u64 = 4;
const TRAILER: u64 = 4;

struct Plan {
    bigtiff: bool,
    ifd_at: Vec<u64>,
    /// Per IFD, per entry: where its out-of-line value goes (None: inline).
    value_at: Vec<Vec<Option<u64>>>,
    /// Per IFD, per block: the data offset (after the leader), 0 for sparse blocks.
    block_at: Vec<Vec<u64>>,
    total: u64,
}

fn even(x: u64) -> u64 {
    x + (x & 1)
}

/// The entries of IFD `ifd` as they will be written, with the offsets and counts entries in
/// the width of this flavour, sorted by tag (TIFF 6.0 §2: ascending order).
fn full_entries(ifd: &IfdOut, e: Endian, bigtiff: bool, offsets: &[u64]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = ifd
        .entries
        .iter()
        .filter_map(|x| fit_flavour(x, e, bigtiff))
        .collect();
    let word = |vals: &mut dyn Iterator<Item = u64>| -> (u16, Vec<u8>) {
        let mut data = Vec::new();
        if bigtiff {
            vals.for_each(|v| e.put_u64(&mut data, v));
            (LONG8, data)
        } else {
            // Classic: every offset is < 2^32 because the whole file is (see `write`).
            vals.for_each(|v| e.put_u32(&mut data, v as u32));
            (LONG, data)
        }
    };
    let n = ifd.blocks.len() as u64;
    let (typ, data) = word(&mut offsets.iter().copied());
    entries.push(Entry {
        tag: TILE_OFFSETS,
        typ,
        count: n,
        data,
    });
    let (typ, data) = word(&mut ifd.blocks.iter().map(|b| b.len() as u64));
    entries.push(Entry {
        tag: TILE_BYTE_COUNTS,
        typ,
        count: n,
        data,
    });
    entries.sort_by_key(|x| x.tag);
    entries
}

/// A copied entry as this flavour can hold it: LONG8 values from a BigTIFF tile become LONG in
/// a classic file when they fit, other 64-bit types are dropped from a classic file.
fn fit_flavour(x: &Entry, e: Endian, bigtiff: bool) -> Option<Entry> {
    if bigtiff || type_size(x.typ).is_some_and(|_| !matches!(x.typ, 16..=18)) {
        return Some(x.clone());
    }
    if x.typ == LONG8 {
        let vals = x.uints(e)?;
        let mut data = Vec::new();
        for v in vals {
            e.put_u32(&mut data, u32::try_from(v).ok()?);
        }
        return Some(Entry {
            tag: x.tag,
            typ: LONG,
            count: x.count,
            data,
        });
    }
    None
}

fn plan(ifds: &[IfdOut], e: Endian, bigtiff: bool) -> Plan {
    let header = if bigtiff { 16 } else { 8 };
    let (count_len, entry_len, link_len, inline_len) = if bigtiff {
        (8, 20, 8, 8)
    } else {
        (2, 12, 4, 4)
    };
    let mut at = even(header + ghost_area().len() as u64);
    let mut ifd_at = Vec::new();
    let mut value_at = Vec::new();
    for ifd in ifds {
        // Offsets are placeholders here: only the entry sizes matter for the plan.
        let zeros = vec![0; ifd.blocks.len()];
        let entries = full_entries(ifd, e, bigtiff, &zeros);
        ifd_at.push(at);
        at += count_len + entries.len() as u64 * entry_len + link_len;
        let mut values = vec![None; entries.len()];
        for i in value_sequence(&entries, &ifd.value_order) {
            let x = &entries[i];
            if x.data.len() as u64 > inline_len {
                at = even(at);
                values[i] = Some(at);
                at += x.data.len() as u64;
            }
        }
        at = even(at);
        value_at.push(values);
    }
    // Data: smallest overview (the last IFD) first, full resolution (the first IFD) last.
    let mut block_at = vec![Vec::new(); ifds.len()];
    for (i, ifd) in ifds.iter().enumerate().rev() {
        for b in &ifd.blocks {
            if b.is_empty() {
                block_at[i].push(0);
            } else {
                block_at[i].push(at + LEADER);
                at += LEADER + b.len() as u64 + TRAILER;
            }
        }
    }
    Plan {
        bigtiff,
        ifd_at,
        value_at,
        block_at,
        total: at,
    }
}

/// Serialise the COG. `ifds[0]` is full resolution, then overviews from largest to smallest.
/// Returns the bytes and whether they are BigTIFF.
pub(crate) fn write(ifds: &[IfdOut], e: Endian, force_bigtiff: bool) -> (Vec<u8>, bool) {
    let file = lay_out(ifds, e, force_bigtiff);
    (file.to_vec(), file.bigtiff)
}

/// Lay the COG out without copying its blocks: see [`LaidOut`].
pub(crate) fn lay_out(ifds: &[IfdOut], e: Endian, force_bigtiff: bool) -> LaidOut {
    lay_out_with_limit(ifds, e, force_bigtiff, u64::from(u32::MAX))
}

/// [`lay_out`] with the largest classic file size as a parameter, so tests can cross it.
fn lay_out_with_limit(
    ifds: &[IfdOut],
    e: Endian,
    force_bigtiff: bool,
    classic_limit: u64,
) -> LaidOut {
    let mut p = plan(ifds, e, force_bigtiff);
    if !p.bigtiff && p.total > classic_limit {
        p = plan(ifds, e, true);
    }
    let mut out = Vec::new();
    // Header (TIFF 6.0 §2; BigTIFF: version 43, offset size 8, reserved 0, 8-byte offset).
    out.extend_from_slice(match e {
        Endian::Little => b"II",
        Endian::Big => b"MM",
    });
    if p.bigtiff {
        e.put_u16(&mut out, 43);
        e.put_u16(&mut out, 8);
        e.put_u16(&mut out, 0);
        e.put_u64(&mut out, p.ifd_at[0]);
    } else {
        e.put_u16(&mut out, 42);
        e.put_u32(&mut out, p.ifd_at[0] as u32);
    }
    out.extend_from_slice(ghost_area().as_bytes());
    for (i, ifd) in ifds.iter().enumerate() {
        pad_to(&mut out, p.ifd_at[i]);
        let entries = full_entries(ifd, e, p.bigtiff, &p.block_at[i]);
        let next = p.ifd_at.get(i + 1).copied().unwrap_or(0);
        if p.bigtiff {
            e.put_u64(&mut out, entries.len() as u64);
        } else {
            e.put_u16(&mut out, entries.len() as u16);
        }
        let inline_len = if p.bigtiff { 8 } else { 4 };
        for (x, at) in entries.iter().zip(&p.value_at[i]) {
            e.put_u16(&mut out, x.tag);
            e.put_u16(&mut out, x.typ);
            let mut value = Vec::with_capacity(inline_len);
            match at {
                None => value.extend_from_slice(&x.data),
                Some(at) if p.bigtiff => e.put_u64(&mut value, *at),
                Some(at) => e.put_u32(&mut value, *at as u32),
            }
            // Inline values are left-justified in the value field (TIFF 6.0 §2).
            value.resize(inline_len, 0);
            if p.bigtiff {
                e.put_u64(&mut out, x.count);
            } else {
                e.put_u32(&mut out, x.count as u32);
            }
            out.extend_from_slice(&value);
        }
        if p.bigtiff {
            e.put_u64(&mut out, next);
        } else {
            e.put_u32(&mut out, next as u32);
        }
        for j in value_sequence(&entries, &ifd.value_order) {
            if let Some(at) = p.value_at[i][j] {
                pad_to(&mut out, at);
                out.extend_from_slice(&entries[j].data);
            }
        }
    }
    // The block data, in file order: each block with its leader, from its leader's offset.
    let mut blocks = Vec::new();
    for (i, ifd) in ifds.iter().enumerate().rev() {
        for (b, &at) in ifd.blocks.iter().zip(&p.block_at[i]) {
            if !b.is_empty() {
                blocks.push((at - LEADER, b.clone()));
            }
        }
    }
    LaidOut {
        head: out,
        blocks,
        total: p.total,
        bigtiff: p.bigtiff,
    }
}

/// A laid-out COG whose blocks are not copied yet: the bytes before the first block (header,
/// ghost area, IFDs and their values) and each block at its place. Any range of the file can be
/// read from it ([`LaidOut::read`]) — a part of an upload — without the whole file ever
/// existing in memory; [`LaidOut::to_vec`] makes the whole file.
#[derive(Debug, Clone)]
pub struct LaidOut {
    head: Vec<u8>,
    /// (offset of the block's leader, the block), in file order.
    blocks: Vec<(u64, Bytes)>,
    total: u64,
    pub(crate) bigtiff: bool,
}

impl LaidOut {
    /// A file that is all head: bytes already written out whole (the GDAL fallback's).
    pub fn whole(bytes: Vec<u8>, bigtiff: bool) -> Self {
        Self {
            total: bytes.len() as u64,
            head: bytes,
            blocks: Vec::new(),
            bigtiff,
        }
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// `len` bytes of the file from `offset` on. Panics past the end of the file.
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        assert!(
            offset + len as u64 <= self.total,
            "read past the end of the laid-out file"
        );
        let mut buf = vec![0u8; len];
        self.place(offset, &mut buf);
        buf
    }

    /// The whole file, its pieces copied on every core.
    pub fn to_vec(&self) -> Vec<u8> {
        const CHUNK: usize = 4 << 20;
        let mut out = vec![0u8; self.total as usize];
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(i, chunk)| self.place((i * CHUNK) as u64, chunk));
        out
    }

    /// Copy into `buf`, which holds the file from `offset` on and is zeroed (padding and the
    /// gaps between pieces stay zero), every piece that overlaps it.
    fn place(&self, offset: u64, buf: &mut [u8]) {
        let end = offset + buf.len() as u64;
        put(buf, offset, 0, &self.head);
        // The first block whose slot ends after `offset`.
        let first = self
            .blocks
            .partition_point(|(at, b)| at + slot_len(b) <= offset);
        for (at, b) in &self.blocks[first..] {
            if *at >= end {
                break;
            }
            put_slot(buf, offset, *at, b);
        }
    }
}

fn slot_len(b: &[u8]) -> u64 {
    LEADER + b.len() as u64 + TRAILER
}

/// Write the part of `src` (which sits at file offset `at`) that overlaps `buf` (which holds
/// the file from `offset`).
fn put(buf: &mut [u8], offset: u64, at: u64, src: &[u8]) {
    let end = offset + buf.len() as u64;
    let (from, to) = (at.max(offset), (at + src.len() as u64).min(end));
    if from < to {
        buf[(from - offset) as usize..(to - offset) as usize]
            .copy_from_slice(&src[(from - at) as usize..(to - at) as usize]);
    }
}

/// Write block `b`'s slot, which starts at file offset `at`, where it overlaps `buf`.
fn put_slot(buf: &mut [u8], offset: u64, at: u64, b: &[u8]) {
    // BLOCK_LEADER=SIZE_AS_UINT4 is little-endian whatever the file's byte order (GDAL's
    // validator reads it with "<I").
    put(buf, offset, at, &(b.len() as u32).to_le_bytes());
    put(buf, offset, at + LEADER, b);
    // BLOCK_TRAILER=LAST_4_BYTES_REPEATED, zero-padded on the left for shorter blocks (the
    // padding is already zero).
    let tail = &b[b.len().saturating_sub(4)..];
    put(
        buf,
        offset,
        at + LEADER + b.len() as u64 + TRAILER - tail.len() as u64,
        tail,
    );
}

fn pad_to(out: &mut Vec<u8>, at: u64) {
    debug_assert!(out.len() as u64 <= at, "layout plan and writer disagree");
    out.resize(at as usize, 0);
}

/// A SHORT entry.
pub(crate) fn short_entry(e: Endian, tag: u16, vals: &[u16]) -> Entry {
    let mut data = Vec::new();
    vals.iter().for_each(|&v| e.put_u16(&mut data, v));
    Entry {
        tag,
        typ: SHORT,
        count: vals.len() as u64,
        data,
    }
}

/// A SHORT entry if the value fits, else LONG (TIFF 6.0 allows either for sizes).
pub(crate) fn size_entry(e: Endian, tag: u16, v: u32) -> Entry {
    match u16::try_from(v) {
        Ok(s) => short_entry(e, tag, &[s]),
        Err(_) => long_entry(e, tag, v),
    }
}

pub(crate) fn long_entry(e: Endian, tag: u16, v: u32) -> Entry {
    let mut data = Vec::new();
    e.put_u32(&mut data, v);
    Entry {
        tag,
        typ: LONG,
        count: 1,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiff;

    #[test]
    fn ghost_area_is_gdals() {
        let g = ghost_area();
        assert!(g.starts_with("GDAL_STRUCTURAL_METADATA_SIZE=000140 bytes\n"));
        // GDAL 3.6 puts the main IFD of a little-endian classic COG at 192.
        assert_eq!(even(8 + g.len() as u64), 192);
    }

    #[test]
    fn bigtiff_exactly_when_classic_would_not_fit() {
        let ifds = [IfdOut {
            entries: vec![size_entry(Endian::Little, 256, 10)],
            blocks: vec![Bytes::from(vec![7u8; 1000])],
            value_order: Vec::new(),
        }];
        let (classic, big) = write(&ifds, Endian::Little, false);
        assert!(!big);
        let size = classic.len() as u64;
        let f = lay_out_with_limit(&ifds, Endian::Little, false, size);
        assert!(!f.bigtiff, "a file of exactly the limit stays classic");
        let f = lay_out_with_limit(&ifds, Endian::Little, false, size - 1);
        assert!(f.bigtiff);
        assert_eq!(&f.to_vec()[..4], b"II\x2b\x00");
    }

    #[test]
    fn round_trips_through_the_parser() {
        for (e, big) in [
            (Endian::Little, false),
            (Endian::Big, false),
            (Endian::Little, true),
        ] {
            let blocks = [&b"abcdefgh"[..], b"", b"xyz"]
                .map(Bytes::from_static)
                .to_vec();
            let ifds = [
                IfdOut {
                    entries: vec![size_entry(e, 256, 70000), short_entry(e, 258, &[8, 8, 8])],
                    blocks,
                    value_order: Vec::new(),
                },
                IfdOut {
                    entries: vec![long_entry(e, 254, 1)],
                    blocks: vec![Bytes::from_static(b"0123456789")],
                    value_order: Vec::new(),
                },
            ];
            let (bytes, bigtiff) = write(&ifds, e, big);
            assert_eq!(bigtiff, big);
            let t = tiff::parse(&bytes).unwrap();
            assert_eq!(t.bigtiff, big);
            assert_eq!(t.ifds.len(), 2);
            let main = &t.ifds[0];
            assert_eq!(main.get(256).unwrap().uints(e), Some(vec![70000]));
            assert_eq!(main.get(258).unwrap().uints(e), Some(vec![8, 8, 8]));
            let offs = main.get(TILE_OFFSETS).unwrap().uints(e).unwrap();
            let counts = main.get(TILE_BYTE_COUNTS).unwrap().uints(e).unwrap();
            assert_eq!(counts, vec![8, 0, 3]);
            assert_eq!(offs[1], 0);
            let block = |o: u64, n: u64| &bytes[o as usize..(o + n) as usize];
            assert_eq!(block(offs[0], 8), b"abcdefgh");
            assert_eq!(block(offs[2], 3), b"xyz");
            // Leader and trailer.
            assert_eq!(block(offs[0] - 4, 4), 8u32.to_le_bytes());
            assert_eq!(block(offs[0] + 8, 4), b"efgh");
            let ovr_off = t.ifds[1].get(TILE_OFFSETS).unwrap().uints(e).unwrap()[0];
            assert!(
                ovr_off < offs[0],
                "overview data comes before full resolution"
            );
        }
    }

    #[test]
    fn any_range_reads_as_the_whole_file() {
        let ifds = [
            IfdOut {
                entries: vec![size_entry(Endian::Little, 256, 3)],
                blocks: [&b"ab"[..], b"", b"cdefghij", b"k"]
                    .map(Bytes::from_static)
                    .to_vec(),
                value_order: Vec::new(),
            },
            IfdOut {
                entries: vec![long_entry(Endian::Little, 254, 1)],
                blocks: vec![Bytes::from_static(b"0123456")],
                value_order: Vec::new(),
            },
        ];
        let f = lay_out(&ifds, Endian::Little, false);
        let whole = f.to_vec();
        assert_eq!(whole.len() as u64, f.len());
        let n = whole.len();
        for start in (0..n).step_by(3) {
            for len in [0, 1, 2, 5, 7, 13, 64, n - start] {
                let len = len.min(n - start);
                let buf = f.read(start as u64, len);
                assert_eq!(buf, &whole[start..start + len], "{start}+{len}");
            }
        }
    }
}
