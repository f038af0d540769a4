//! Local-store behaviour that only a directory has: files people drop in, sidecars, the
//! internal directory, crash-leftover sweeps, key/directory conflicts. The behaviour every
//! backend shares is in the conformance suite (`crates/tilegate-conformance`).

use super::*;
use tilegate_core::object::ObjectStoreExt as _;

fn object_key(k: impl AsRef<str>) -> ObjectKey {
    ObjectKey::parse(k.as_ref()).expect("a valid key")
}

fn store() -> (tempfile::TempDir, LocalObjectStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalObjectStore::open(dir.path()).unwrap();
    (dir, s)
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir).unwrap().count()
}

fn content_etag(bytes: &[u8]) -> ETag {
    fsx::etag_of(&blake3::hash(bytes))
}

#[tokio::test]
async fn a_file_dropped_in_by_a_person_is_an_object() {
    let (dir, s) = store();
    fs::create_dir_all(dir.path().join("in")).unwrap();
    fs::write(dir.path().join("in/scene.tif"), b"hand-made").unwrap();
    let meta = s.head(&object_key("in/scene.tif")).await.unwrap().unwrap();
    assert_eq!(meta.e_tag, content_etag(b"hand-made"));
    assert_eq!(meta.size, 9);
    let out = s
        .put_update(
            &object_key("in/scene.tif"),
            Bytes::from_static(b"v2"),
            UpdateVersion::from(&meta),
        )
        .await
        .unwrap();
    assert!(matches!(out, PutOutcome::Written(_)), "{out:?}");
    assert_eq!(
        fs::read(dir.path().join("in/scene.tif")).unwrap(),
        b"v2".to_vec()
    );
}

#[tokio::test]
async fn an_in_place_rewrite_invalidates_the_sidecar() {
    let (dir, s) = store();
    s.put_create(&object_key("k/a"), Bytes::from_static(b"first"))
        .await
        .unwrap();
    // A person rewrites the file in place (same inode, new size and mtime).
    fs::write(dir.path().join("k/a"), b"second, longer").unwrap();
    let meta = s.head(&object_key("k/a")).await.unwrap().unwrap();
    assert_eq!(meta.e_tag, content_etag(b"second, longer"));
}

/// The sidecar attribute of the file at `path`, as text.
fn sidecar_attr(path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt as _;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated path and name, a buffer of the given length.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            c"user.tilegate.sidecar".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

#[tokio::test]
async fn create_keeps_the_sidecar_on_the_object_and_leaves_no_temp_files() {
    let (dir, s) = store();
    let mut opts = PutOptions::create();
    opts.metadata.insert("attempt".into(), "a1".into());
    s.put_opts(&object_key("k/a"), Bytes::from_static(b"1"), opts.clone())
        .await
        .unwrap();
    let second = s
        .put_opts(&object_key("k/a"), Bytes::from_static(b"2"), opts)
        .await
        .unwrap();
    assert_eq!(second, PutOutcome::AlreadyPresent);
    let internal = dir.path().join(INTERNAL_DIR);
    assert_eq!(count_files(&internal.join("tmp")), 0);
    // An attribute of the object's own inode: no file per object.
    assert_eq!(count_files(&internal.join("meta")), 0);
    let attr = sidecar_attr(&dir.path().join("k/a")).expect("the sidecar attribute");
    assert!(attr.contains(r#""attempt":"a1""#), "{attr}");
    let meta = s.head(&object_key("k/a")).await.unwrap().unwrap();
    assert_eq!(meta.metadata.get("attempt").map(String::as_str), Some("a1"));

    s.delete_opts(&object_key("k/a"), DeleteOptions::default())
        .await
        .unwrap();
    assert!(!dir.path().join("k/a").exists());
}

#[tokio::test]
async fn update_replaces_the_sidecar() {
    let (dir, s) = store();
    let PutOutcome::Written(m) = s
        .put_create(&object_key("k/a"), Bytes::from_static(b"1"))
        .await
        .unwrap()
    else {
        panic!("not written")
    };
    s.put_update(
        &object_key("k/a"),
        Bytes::from_static(b"2"),
        UpdateVersion::from(&m),
    )
    .await
    .unwrap();
    let attr = sidecar_attr(&dir.path().join("k/a")).expect("the sidecar attribute");
    let etag = content_etag(b"2");
    assert!(attr.contains(etag.as_str().trim_matches('"')), "{attr}");
    assert_eq!(count_files(&dir.path().join(INTERNAL_DIR).join("meta")), 0);
}

/// A data directory written before sidecars became attributes keeps working: an object with
/// a sidecar file (and no attribute) is described from that file, metadata included.
#[tokio::test]
async fn a_sidecar_file_from_an_older_data_directory_is_still_read() {
    let (dir, s) = store();
    let mut opts = PutOptions::create();
    opts.metadata.insert("attempt".into(), "old".into());
    s.put_opts(&object_key("k/a"), Bytes::from_static(b"1"), opts)
        .await
        .unwrap();
    let path = dir.path().join("k/a");
    let attr = sidecar_attr(&path).unwrap();
    // Move the sidecar from the attribute to the file an older version wrote.
    let st = Stat::of_file(&File::open(&path).unwrap()).unwrap();
    let file = sidecar::path(&dir.path().join(INTERNAL_DIR).join("meta"), "k/a", &st);
    fs::write(&file, &attr).unwrap();
    {
        use std::os::unix::ffi::OsStrExt as _;
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated path and name.
        let r = unsafe { libc::removexattr(p.as_ptr(), c"user.tilegate.sidecar".as_ptr()) };
        assert_eq!(r, 0);
    }
    let meta = s.head(&object_key("k/a")).await.unwrap().unwrap();
    assert_eq!(
        meta.metadata.get("attempt").map(String::as_str),
        Some("old")
    );
}

#[tokio::test]
async fn internal_directory_is_neither_addressable_nor_listed() {
    let (_dir, s) = store();
    s.put_create(&object_key("x"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    // No key can name it: an ObjectKey's first segment is never `.tilegate`.
    assert_eq!(INTERNAL_DIR, keys::STORE_RESERVED);
    for inside in [".tilegate/tmp/evil", ".tilegate/meta"] {
        let err = ObjectKey::checked(inside).unwrap_err();
        assert!(matches!(err, StoreError::InvalidKey { .. }), "{err:?}");
    }
    let keys: Vec<String> = s
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(keys, vec!["x".to_owned()]);
    assert!(s.list(".tilegate/").await.unwrap().is_empty());
}

#[test]
fn open_sweeps_old_temp_files_only() {
    let dir = tempfile::tempdir().unwrap();
    drop(LocalObjectStore::open(dir.path()).unwrap());
    let tmp = dir.path().join(INTERNAL_DIR).join("tmp");
    let old = tmp.join("old.tmp");
    let fresh = tmp.join("fresh.tmp");
    fs::write(&old, b"partial").unwrap();
    fs::write(&fresh, b"in flight").unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    drop(LocalObjectStore::open(dir.path()).unwrap());
    assert!(!old.exists());
    assert!(fresh.exists());
}

#[tokio::test]
async fn an_object_cannot_also_be_a_directory() {
    let (_dir, s) = store();
    s.put_create(&object_key("a/b"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    let err = s
        .put_create(&object_key("a/b/c"), Bytes::from_static(b"2"))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    let err = s
        .put_create(&object_key("a"), Bytes::from_static(b"3"))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    assert!(s.head(&object_key("a")).await.unwrap().is_none());
}

#[test]
fn range_resolution() {
    assert_eq!(resolve_range(None, 10).unwrap(), 0..10);
    assert_eq!(resolve_range(Some(2..5), 10).unwrap(), 2..5);
    assert_eq!(resolve_range(Some(5..100), 10).unwrap(), 5..10);
    assert_eq!(resolve_range(Some(0..4), 0).unwrap(), 0..0);
    assert!(matches!(
        resolve_range(Some(10..12), 10),
        Err(EmbeddedError::Range(RangeError::NotSatisfiable { .. }))
    ));
    assert!(matches!(
        resolve_range(Some(4..4), 10),
        Err(EmbeddedError::Range(RangeError::Empty { .. }))
    ));
}

#[tokio::test]
async fn multipart_part_etag_mismatch_is_refused_and_upload_kept() {
    let (_dir, s) = store();
    let id = s
        .create_multipart(&object_key("m/x"), &PutOptions::default())
        .await
        .unwrap();
    let mut p = s
        .upload_part(&object_key("m/x"), &id, 1, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    p.e_tag = ETag::new("\"wrong\"");
    let err = s
        .complete_multipart(&object_key("m/x"), &id, &[p], &PutMode::Create)
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
    assert_eq!(s.list_multipart("m/", None).await.unwrap().len(), 1);
    assert!(s.head(&object_key("m/x")).await.unwrap().is_none());
    // An upload ID is never a path.
    assert!(matches!(
        s.abort_multipart(&object_key("m/x"), "../../x")
            .await
            .unwrap_err(),
        StoreError::NotFound { .. }
    ));
}

/// A completion that fails (a fault, not an outcome) must leave the upload completable: the
/// spool it would have published stays in the upload.
#[tokio::test]
async fn a_failed_completion_leaves_the_upload_completable() {
    let (dir, s) = store();
    let key = "blocked/scene.tif";
    let id = s
        .create_multipart(&object_key(key), &PutOptions::create())
        .await
        .unwrap();
    let (one, two) = (vec![1u8; 4096], vec![2u8; 1000]);
    let parts = vec![
        s.upload_part(&object_key(key), &id, 1, Bytes::from(one.clone()))
            .await
            .unwrap(),
        s.upload_part(&object_key(key), &id, 2, Bytes::from(two.clone()))
            .await
            .unwrap(),
    ];
    // A file where the key's directory must go: publishing fails with an I/O error.
    fs::write(dir.path().join("blocked"), b"in the way").unwrap();
    let failed = s
        .complete_multipart(&object_key(key), &id, &parts, &PutMode::Create)
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(s.list_multipart("", None).await.unwrap().len(), 1);

    fs::remove_file(dir.path().join("blocked")).unwrap();
    let out = s
        .complete_multipart(&object_key(key), &id, &parts, &PutMode::Create)
        .await
        .unwrap();
    let PutOutcome::Written(meta) = out else {
        panic!("second completion: {out:?}");
    };
    let whole = [one, two].concat();
    assert_eq!(meta.e_tag, content_etag(&whole));
    assert_eq!(fs::read(dir.path().join(key)).unwrap(), whole);
    assert!(s.list_multipart("", None).await.unwrap().is_empty());
}

#[test]
fn writes_cut_into_chunks_land_at_their_offsets() {
    use std::os::unix::fs::FileExt as _;
    let dir = tempfile::tempdir().unwrap();
    let f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.path().join("f"))
        .unwrap();
    // Two and a half chunks, written past a small offset: every chunk where it belongs.
    let bytes: Vec<u8> = (0..fsx::WRITE_CHUNK * 5 / 2)
        .map(|i| (i % 251) as u8)
        .collect();
    fsx::write_all_at(&f, &bytes, 7).unwrap();
    let mut back = vec![0u8; bytes.len() + 7];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back[..7], &[0u8; 7]);
    assert_eq!(&back[7..], &bytes[..]);
}
