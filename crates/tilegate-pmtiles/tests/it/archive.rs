//! Archives written, then read back tile by tile: directories, leaves, deduplication, runs, and
//! the header's fields.

use tilegate_pmtiles::archive::{Entry, HEADER_LEN, ROOT_FETCH_LEN, tileid_to_zxy, zxy_to_tileid};
use tilegate_pmtiles::{
    ArchiveBuilder, ArchiveError, ArchiveOptions, ArchiveReader, Bbox, Compression, ContentKey,
    Tile, TileType, find_tile, read_header, write_archive,
};

/// Every tile of zooms `0..=max_zoom`.
fn pyramid(max_zoom: u8) -> Vec<Tile> {
    (0..=max_zoom)
        .flat_map(|z| {
            let n = 1u32 << z;
            (0..n).flat_map(move |x| (0..n).map(move |y| Tile::new(z, x, y)))
        })
        .collect()
}

/// Distinct bytes per tile, of lengths that look random (so that directories do not compress).
fn distinct(t: Tile) -> Vec<u8> {
    let h = (u64::from(t.x).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        ^ (u64::from(t.y).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        ^ u64::from(t.z);
    format!("{t}|")
        .repeat((h >> 40) as usize % 40 + 1)
        .into_bytes()
}

#[test]
fn small_archive_round_trips_with_a_root_only() {
    let tiles = pyramid(3);
    let mut options = ArchiveOptions::new(TileType::Png);
    options.metadata.insert("name".into(), "small".into());
    // Reversed: the writer sorts.
    let archive = write_archive(tiles.iter().rev().map(|&t| (t, distinct(t))), options).unwrap();
    let reader = ArchiveReader::new(&archive).unwrap();
    let h = reader.header();
    assert_eq!(h.leaf_directories_length, 0);
    assert!(h.root_offset as usize + h.root_length as usize <= ROOT_FETCH_LEN);
    assert_eq!(
        (h.addressed_tiles, h.tile_entries, h.tile_contents),
        (85, 85, 85)
    );
    assert_eq!(
        (h.min_zoom, h.max_zoom, h.tile_type, h.tile_compression),
        (0, 3, TileType::Png, Compression::None)
    );
    assert_eq!(h.internal_compression, Compression::Gzip);
    assert!(h.clustered);
    assert_eq!(
        h.tile_data_offset + h.tile_data_length,
        archive.len() as u64
    );
    assert_eq!(
        reader.metadata().unwrap(),
        serde_json::json!({"name": "small"})
    );
    for &t in &tiles {
        assert_eq!(
            reader.tile(t.z, t.x, t.y).unwrap().unwrap(),
            distinct(t),
            "{t}"
        );
    }
    assert_eq!(reader.tile(4, 0, 0).unwrap(), None);
    assert!(matches!(
        reader.tile(2, 4, 0),
        Err(ArchiveError::TileOutsideZoom { .. })
    ));
    // Default bounds: the whole world's Web Mercator square; center: its middle at min zoom.
    assert_eq!(h.min_position.lon_e7, -1_800_000_000);
    assert_eq!(h.max_position.lat_e7, 850_511_288);
    assert_eq!(
        (
            h.center_zoom,
            h.center_position.lon_e7,
            h.center_position.lat_e7
        ),
        (0, 0, 0)
    );
    // The free functions agree.
    assert_eq!(&read_header(&archive).unwrap(), h);
    let at = find_tile(&archive, 3, 5, 2).unwrap().unwrap();
    assert_eq!(
        &archive[at.offset as usize..(at.offset + at.length) as usize],
        distinct(Tile::new(3, 5, 2))
    );
}

/// A 9-zoom pyramid (87,381 tiles with lengths that do not compress) overflows 16 KiB of root:
/// the writer puts leaves below it, and every tile is still found.
#[test]
fn many_tiles_need_leaf_directories() {
    let tiles = pyramid(8);
    let archive = write_archive(
        tiles.iter().map(|&t| (t, distinct(t))),
        ArchiveOptions::new(TileType::Webp),
    )
    .unwrap();
    let reader = ArchiveReader::new(&archive).unwrap();
    let h = reader.header();
    assert!(h.leaf_directories_length > 0);
    assert!(HEADER_LEN as u64 + h.root_length <= ROOT_FETCH_LEN as u64);
    let root = reader.root_directory().unwrap();
    assert!(root.len() > 1 && root.iter().all(|e| e.run_length == 0));
    // Leaves ascend by starting tile ID and each holds 4096 entries but the last.
    assert!(root.windows(2).all(|w| w[0].tile_id < w[1].tile_id));
    assert_eq!(reader.leaf_directory(&root[0]).unwrap().len(), 4096);
    assert_eq!(h.addressed_tiles, tiles.len() as u64);
    // Every tile through the directories' entries (all distinct here: one entry each) …
    let entries = reader.tile_entries().unwrap();
    assert_eq!(entries.len(), tiles.len());
    for e in &entries {
        let t = tileid_to_zxy(e.tile_id).unwrap();
        let at = (h.tile_data_offset + e.offset) as usize;
        assert_eq!(&archive[at..at + e.length as usize], distinct(t), "{t}");
    }
    // … and a sample (each leaf's first and last tile among them) by lookup from the root.
    let edges = entries.chunks(4096).flat_map(|c| [c[0], c[c.len() - 1]]);
    for e in entries.iter().step_by(61).copied().chain(edges) {
        let t = tileid_to_zxy(e.tile_id).unwrap();
        assert_eq!(
            reader.tile(t.z, t.x, t.y).unwrap().unwrap(),
            distinct(t),
            "{t}"
        );
    }
    assert_eq!(reader.tile(9, 0, 0).unwrap(), None);
}

/// Identical consecutive tiles become one entry with a run length; identical tiles apart share
/// one offset; each content is stored once, in tile-ID order.
#[test]
fn deduplication_and_runs() {
    let sea = b"sea".to_vec();
    let at = |id| tileid_to_zxy(id).unwrap();
    // IDs 5..=8 are zoom 2's first four tiles, consecutive on the curve.
    let mut tiles = vec![
        (at(5), sea.clone()),
        (at(6), sea.clone()),
        (at(7), sea.clone()),
        (at(8), b"land".to_vec()),
        (Tile::new(0, 0, 0), b"world".to_vec()),
        (Tile::new(2, 3, 3), sea.clone()),
    ];
    tiles.reverse();
    let archive = write_archive(tiles.clone(), ArchiveOptions::new(TileType::Unknown)).unwrap();
    let reader = ArchiveReader::new(&archive).unwrap();
    let h = reader.header();
    assert_eq!(
        (h.addressed_tiles, h.tile_entries, h.tile_contents),
        (6, 4, 3)
    );
    assert_eq!(h.tile_data_length, (5 + 3 + 4) as u64);
    let id = |z, x, y| zxy_to_tileid(z, x, y).unwrap();
    assert_eq!(
        reader.root_directory().unwrap(),
        vec![
            Entry {
                tile_id: 0,
                offset: 0,
                length: 5,
                run_length: 1
            },
            Entry {
                tile_id: 5,
                offset: 5,
                length: 3,
                run_length: 3
            },
            Entry {
                tile_id: 8,
                offset: 8,
                length: 4,
                run_length: 1
            },
            Entry {
                tile_id: id(2, 3, 3),
                offset: 5,
                length: 3,
                run_length: 1
            },
        ]
    );
    assert_eq!(&archive[h.tile_data_offset as usize..], b"worldsealand");
    for (t, bytes) in &tiles {
        assert_eq!(
            reader.tile(t.z, t.x, t.y).unwrap().unwrap(),
            bytes.as_slice(),
            "{t}"
        );
    }
    // Inside the span of IDs but not added.
    assert_eq!(reader.tile(1, 0, 0).unwrap(), None);
    assert_eq!(reader.tile(2, 2, 2).unwrap(), None);
    assert_eq!(reader.tile(at(9).z, at(9).x, at(9).y).unwrap(), None);
}

/// The streaming shape: plan from keys alone, then copy each blob's bytes when asked.
#[test]
fn planned_layout_is_written_blob_by_blob() {
    let tiles = pyramid(4);
    let mut builder = ArchiveBuilder::new(ArchiveOptions::new(TileType::Png));
    for &t in &tiles {
        builder.add(t, ContentKey::of(&distinct(t))).unwrap();
    }
    let layout = builder.finish().unwrap();
    assert_eq!(layout.prefix.len() as u64, layout.header.tile_data_offset);
    let mut at = layout.header.tile_data_offset;
    for blob in &layout.blobs {
        assert_eq!(blob.offset, at);
        at += u64::from(blob.content.length);
    }
    assert_eq!(at, layout.total_len());
    let mut asked = 0;
    let mut out = Vec::new();
    let n = layout
        .write_to(&mut out, |blob| {
            asked += 1;
            Ok(distinct(blob.first_tile))
        })
        .unwrap();
    assert_eq!((n, asked), (layout.total_len(), tiles.len()));
    assert_eq!(
        out,
        write_archive(
            tiles.iter().map(|&t| (t, distinct(t))),
            ArchiveOptions::new(TileType::Png)
        )
        .unwrap()
    );
    // Bytes that are not the planned content are refused.
    let err = layout
        .write_to(&mut Vec::new(), |_| Ok(b"other".to_vec()))
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
}

#[test]
fn header_fields_from_options() {
    let mut options = ArchiveOptions::new(TileType::Mvt);
    options.bounds = Some(Bbox::new(5.95, 45.81, 10.49, 47.81));
    options.center = Some((8.2275, 46.8182, 9));
    let archive = write_archive(
        [
            (Tile::new(10, 533, 360), vec![1]),
            (Tile::new(12, 2134, 1443), vec![2]),
        ],
        options,
    )
    .unwrap();
    let h = read_header(&archive).unwrap();
    assert_eq!((h.min_zoom, h.max_zoom, h.center_zoom), (10, 12, 9));
    assert_eq!(
        (h.tile_type, h.tile_compression),
        (TileType::Mvt, Compression::Gzip)
    );
    assert_eq!(
        (h.min_position.lon_e7, h.min_position.lat_e7),
        (59_500_000, 458_100_000)
    );
    assert_eq!(
        (h.max_position.lon_e7, h.max_position.lat_e7),
        (104_900_000, 478_100_000)
    );
    assert_eq!(
        (h.center_position.lon_e7, h.center_position.lat_e7),
        (82_275_000, 468_182_000)
    );
    // Bytes 102.. hold min lon then min lat (spec §3.4: longitude first).
    assert_eq!(&archive[102..106], &59_500_000i32.to_le_bytes());
}

#[test]
fn refusals() {
    let mut b = ArchiveBuilder::new(ArchiveOptions::new(TileType::Png));
    assert!(matches!(
        b.add_bytes(Tile::new(1, 0, 0), b""),
        Err(ArchiveError::EmptyTile { .. })
    ));
    assert!(matches!(
        b.add_bytes(Tile::new(32, 0, 0), b"x"),
        Err(ArchiveError::ZoomTooDeep { .. })
    ));
    assert!(matches!(
        b.add_bytes(Tile::new(1, 2, 0), b"x"),
        Err(ArchiveError::TileOutsideZoom { .. })
    ));
    assert!(b.is_empty());
    assert!(matches!(
        ArchiveBuilder::new(ArchiveOptions::new(TileType::Png)).finish(),
        Err(ArchiveError::NoTiles)
    ));
    b.add_bytes(Tile::new(1, 1, 0), b"x").unwrap();
    b.add_bytes(Tile::new(1, 1, 0), b"y").unwrap();
    assert!(
        matches!(b.finish(), Err(ArchiveError::DuplicateTile { tile }) if tile == Tile::new(1, 1, 0))
    );
    assert!(matches!(
        ArchiveReader::new(
            b"not an archive at all, but long enough to hold a header? no: too short"
        ),
        Err(ArchiveError::Corrupt { .. })
    ));
    let mut archive = write_archive(
        [(Tile::new(0, 0, 0), vec![1])],
        ArchiveOptions::new(TileType::Png),
    )
    .unwrap();
    archive[7] = 2;
    assert!(matches!(
        ArchiveReader::new(&archive),
        Err(ArchiveError::UnsupportedVersion { version: 2 })
    ));
    archive[0] = b'X';
    assert!(matches!(
        ArchiveReader::new(&archive),
        Err(ArchiveError::NotPmtiles)
    ));
}
