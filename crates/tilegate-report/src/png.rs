//! The smallest PNG writer the report needs: an 8-bit paletted image, one byte per pixel,
//! compressed with zlib (libdeflate).

/// A PNG of `width` × `height` palette indices (`pixels`, row by row) over `palette`.
pub fn paletted(width: u32, height: u32, pixels: &[u8], palette: &[[u8; 3]]) -> Vec<u8> {
    assert_eq!(
        pixels.len(),
        width as usize * height as usize,
        "one index per pixel"
    );
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // 8 bits, colour type 3 (paletted), deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, 3, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"PLTE", &palette.concat());
    // Each row starts with its filter type: 0, none.
    let mut raw = Vec::with_capacity(pixels.len() + height as usize);
    for row in pixels.chunks(width.max(1) as usize) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    let mut z = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    let mut idat = vec![0; z.zlib_compress_bound(raw.len())];
    let n = z
        .zlib_compress(&raw, &mut idat)
        .expect("the bound holds the compressed rows");
    idat.truncate(n);
    chunk(&mut png, b"IDAT", &idat);
    chunk(&mut png, b"IEND", &[]);
    png
}

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = libdeflater::crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_paletted_image_has_its_chunks_and_decompresses_to_its_rows() {
        let png = super::paletted(
            3,
            2,
            &[0, 1, 2, 2, 1, 0],
            &[[0, 0, 0], [255, 0, 0], [0, 255, 0]],
        );
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(&png[16..24], &[0, 0, 0, 3, 0, 0, 0, 2]);
        assert!(png.ends_with(&[0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xAE, 0x42, 0x60, 0x82]));
        let at = png.windows(4).position(|w| w == b"IDAT").unwrap();
        let len = u32::from_be_bytes(png[at - 4..at].try_into().unwrap()) as usize;
        let mut out = vec![0; 8];
        let n = libdeflater::Decompressor::new()
            .zlib_decompress(&png[at + 4..at + 4 + len], &mut out)
            .unwrap();
        assert_eq!(&out[..n], &[0, 0, 1, 2, 0, 2, 1, 0]);
    }
}
