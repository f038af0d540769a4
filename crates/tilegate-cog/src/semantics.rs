//! What a source's bands mean, beyond their pixels — colour interpretation (alpha included),
//! description, scale and offset, units, colour table, the per-dataset mask, and dataset
//! metadata that describes the data (`AREA_OR_POINT`) — read once per opened source and put on
//! every tile, so that a tile (and the scene assembled from tiles) carries what
//! `gdal_translate -of COG` of the same extent would carry.

use gdal::Dataset;
use gdal::Metadata as _;
use gdal::errors::GdalError;
use gdal::raster::{ColorEntry, ColorInterpretation, ColorTable, PaletteInterpretation};
use std::ffi::CString;
use std::sync::Arc;

/// One band's meaning.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BandSemantics {
    /// GDAL's colour interpretation (`GDALColorInterp`): the crate's enum is not `Clone`.
    pub color: gdal_sys::GDALColorInterp::Type,
    pub description: String,
    pub scale: Option<f64>,
    pub offset: Option<f64>,
    pub unit: String,
    /// The palette, entry by entry (RGBA), with its interpretation.
    pub palette: Option<(PaletteInterpretation, Vec<ColorEntry>)>,
}

impl BandSemantics {
    /// A band that means nothing in particular beyond `description` (a computed band).
    pub(crate) fn plain(description: &str) -> Self {
        Self {
            color: ColorInterpretation::GrayIndex.c_int(),
            description: description.to_owned(),
            scale: None,
            offset: None,
            unit: String::new(),
            palette: None,
        }
    }
}

/// A source's meaning: every band's, whether it has a per-dataset mask, and the dataset
/// metadata kept on tiles.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Semantics {
    /// Shared with every window's pixels: read once per opened source, never copied.
    pub bands: Vec<Arc<BandSemantics>>,
    /// The source has one mask shared by all bands (`GMF_PER_DATASET`), not derived from
    /// nodata or an alpha band: the tiles carry it as an internal mask.
    pub dataset_mask: bool,
    /// Dataset metadata items (default domain) that describe the data, not its statistics.
    pub metadata: Arc<[(String, String)]>,
}

/// Dataset metadata items of the default domain that a tile keeps.
const KEPT_METADATA: [&str; 1] = ["AREA_OR_POINT"];

/// Read the meaning of every band of `ds`.
pub(crate) fn read(ds: &Dataset) -> Result<Semantics, GdalError> {
    let mut bands = Vec::with_capacity(ds.raster_count());
    let mut dataset_mask = false;
    for i in 1..=ds.raster_count() {
        let b = ds.rasterband(i)?;
        let palette = b.color_table().map(|t| {
            let entries = (0..t.entry_count())
                .filter_map(|e| t.entry(e))
                .collect::<Vec<_>>();
            (t.palette_interpretation(), entries)
        });
        if i == 1 {
            dataset_mask = tilegate_cogwrite::has_dataset_mask(&b)?;
        }
        bands.push(Arc::new(BandSemantics {
            color: b.color_interpretation().c_int(),
            description: b.description().unwrap_or_default(),
            scale: b.scale(),
            offset: b.offset(),
            unit: b.unit(),
            palette,
        }));
    }
    let metadata = KEPT_METADATA
        .iter()
        .filter_map(|k| ds.metadata_item(k, "").map(|v| ((*k).to_owned(), v)))
        .collect();
    Ok(Semantics {
        bands,
        dataset_mask,
        metadata,
    })
}

/// Put `bands` (one per band of `ds`, in order) and the dataset `metadata` on `ds`.
pub(crate) fn apply(
    ds: &mut Dataset,
    bands: &[Arc<BandSemantics>],
    metadata: &[(String, String)],
) -> Result<(), GdalError> {
    for (k, v) in metadata {
        ds.set_metadata_item(k, v, "")?;
    }
    for (i, s) in bands.iter().enumerate() {
        let mut b = ds.rasterband(i + 1)?;
        if let Some(color) = ColorInterpretation::from_c_int(s.color) {
            b.set_color_interpretation(color)?;
        }
        if !s.description.is_empty() {
            b.set_description(&s.description)?;
        }
        if let Some(scale) = s.scale
            && scale != 1.0
        {
            b.set_scale(scale)?;
        }
        if let Some(offset) = s.offset
            && offset != 0.0
        {
            b.set_offset(offset)?;
        }
        if !s.unit.is_empty() {
            set_unit(&mut b, &s.unit)?;
        }
        if let Some((interp, entries)) = &s.palette {
            let mut table = ColorTable::new(*interp);
            for (n, e) in entries.iter().enumerate() {
                table.set_color_entry(u16::try_from(n).unwrap_or(u16::MAX), e);
            }
            b.set_color_table(&table);
        }
    }
    Ok(())
}

/// The gdal crate has no setter for a band's unit type.
fn set_unit(band: &mut gdal::raster::RasterBand<'_>, unit: &str) -> Result<(), GdalError> {
    let c = CString::new(unit).map_err(GdalError::FfiNulError)?;
    // SAFETY: the band handle is valid for the borrow; GDAL copies the string.
    let err = unsafe { gdal_sys::GDALSetRasterUnitType(band.c_rasterband(), c.as_ptr()) };
    if err == gdal_sys::CPLErr::CE_None {
        Ok(())
    } else {
        Err(crate::ffi::last_error(err))
    }
}
