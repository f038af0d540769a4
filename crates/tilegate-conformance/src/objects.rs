//! Object-store conformance: create-if-absent, compare-and-swap, conditional reads and
//! deletes, listing, multipart, key validation, and the races that prove the guards.

use super::{ObjectHarness, skip, unenforced, unique};
use crate::object_key;
use bytes::Bytes;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tilegate_core::object::{
    ATTEMPT_METADATA, DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, ObjectMeta,
    ObjectStore, ObjectStoreExt as _, PartId, PutMode, PutOptions, PutOutcome, UpdateVersion,
};
use tilegate_core::{ConditionList, ETag, ObjectKey, StoreError};

fn written(out: PutOutcome) -> ObjectMeta {
    match out {
        PutOutcome::Written(m) => m,
        other => panic!("expected Written, got {other:?}"),
    }
}

async fn bytes_at(s: &dyn ObjectStore, key: &str) -> Vec<u8> {
    s.get_bytes(&object_key(key))
        .await
        .expect("get")
        .bytes
        .to_vec()
}

async fn head(s: &dyn ObjectStore, key: &str) -> ObjectMeta {
    s.head(&object_key(key))
        .await
        .expect("head")
        .expect("object exists")
}

/// A part of at least the backend's minimum size, filled with `fill`.
fn part(h: &dyn ObjectHarness, fill: u8, len: usize) -> Bytes {
    Bytes::from(vec![fill; len.max(h.caps().min_part_size)])
}

pub async fn create_twice_keeps_first(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/tile.tif", unique("create-twice"));
    let first = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"first"))
            .await
            .unwrap(),
    );
    assert_eq!(first.size, 5);
    let before = head(&*s, &key).await;
    assert_eq!(before.e_tag, first.e_tag);
    assert_eq!(before.last_modified, first.last_modified);

    tokio::time::sleep(h.caps().last_modified_resolution).await;
    let second = s
        .put_create(&object_key(&key), Bytes::from_static(b"second"))
        .await
        .unwrap();
    assert_eq!(second, PutOutcome::AlreadyPresent);

    let after = head(&*s, &key).await;
    assert_eq!(
        after.e_tag, before.e_tag,
        "a refused Create changed the ETag"
    );
    assert_eq!(
        after.last_modified, before.last_modified,
        "a refused Create changed LastModified"
    );
    assert_eq!(after.size, 5);
    assert_eq!(bytes_at(&*s, &key).await, b"first");
}

pub async fn update_with_current_etag_writes(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/t", unique("update"));
    let v1 = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"v1"))
            .await
            .unwrap(),
    );
    tokio::time::sleep(h.caps().last_modified_resolution).await;
    let v2 = written(
        s.put_update(
            &object_key(&key),
            Bytes::from_static(b"v2 longer"),
            UpdateVersion::from(&v1),
        )
        .await
        .unwrap(),
    );
    assert_ne!(v2.e_tag, v1.e_tag);
    assert_eq!(v2.size, 9);
    let now = head(&*s, &key).await;
    assert_eq!(now.e_tag, v2.e_tag);
    assert_ne!(
        now.last_modified, v1.last_modified,
        "LastModified did not change on a rewrite"
    );
    assert_eq!(bytes_at(&*s, &key).await, b"v2 longer");
}

pub async fn update_with_stale_etag_is_superseded(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/t", unique("stale"));
    let v1 = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"v1"))
            .await
            .unwrap(),
    );
    let v2 = written(
        s.put_update(
            &object_key(&key),
            Bytes::from_static(b"v2"),
            UpdateVersion::from(&v1),
        )
        .await
        .unwrap(),
    );
    // A repair that read v1 must not clobber v2.
    let out = s
        .put_update(
            &object_key(&key),
            Bytes::from_static(b"v3"),
            UpdateVersion::from(&v1),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::Superseded);
    let now = head(&*s, &key).await;
    assert_eq!(now.e_tag, v2.e_tag);
    assert_eq!(now.last_modified, v2.last_modified);
    assert_eq!(bytes_at(&*s, &key).await, b"v2");

    // Updating an absent object is superseded too, and creates nothing.
    let absent = format!("{}/none", unique("stale"));
    let out = s
        .put_update(
            &object_key(&absent),
            Bytes::from_static(b"x"),
            UpdateVersion::from(&v1),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::Superseded);
    assert!(s.head(&object_key(&absent)).await.unwrap().is_none());
}

pub async fn overwrite_replaces(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/t", unique("overwrite"));
    let plain = PutOptions::default();
    let a = written(
        s.put_opts(&object_key(&key), Bytes::from_static(b"a"), plain.clone())
            .await
            .unwrap(),
    );
    tokio::time::sleep(h.caps().last_modified_resolution).await;
    let b = written(
        s.put_opts(&object_key(&key), Bytes::from_static(b"bb"), plain)
            .await
            .unwrap(),
    );
    assert_ne!(a.e_tag, b.e_tag);
    let now = head(&*s, &key).await;
    assert_eq!(now.e_tag, b.e_tag);
    assert_ne!(now.last_modified, a.last_modified);
    assert_eq!(bytes_at(&*s, &key).await, b"bb");
}

pub async fn metadata_round_trips(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/t", unique("metadata"));
    let mut opts = PutOptions::create();
    opts.metadata.insert("attempt".into(), "a-1".into());
    opts.metadata.insert("owner".into(), "worker-7".into());
    // A conditional write's attempt token is metadata too: the caller's own is kept as given
    // (cloud stores add one where the caller set none).
    opts.metadata
        .insert(ATTEMPT_METADATA.into(), "caller-token".into());
    let w = written(
        s.put_opts(&object_key(&key), Bytes::from_static(b"x"), opts.clone())
            .await
            .unwrap(),
    );
    assert_eq!(w.metadata, opts.metadata);
    assert_eq!(head(&*s, &key).await.metadata, opts.metadata);
    assert_eq!(
        s.get_bytes(&object_key(&key)).await.unwrap().meta.metadata,
        opts.metadata
    );
}

pub async fn head_and_get_of_absent(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/missing.tif", unique("absent"));
    assert_eq!(s.head(&object_key(&key)).await.unwrap(), None);
    let err = s
        .get_opts(&object_key(&key), GetOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    assert!(!err.is_retryable());
}

pub async fn get_ranges(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/digits", unique("ranges"));
    let w = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"0123456789"))
            .await
            .unwrap(),
    );
    let r = s.get_range(&object_key(&key), 2..5).await.unwrap();
    assert_eq!(&r.bytes[..], b"234");
    assert_eq!(r.range, 2..5);
    assert_eq!(r.meta.e_tag, w.e_tag);
    assert_eq!(r.meta.size, 10);

    let r = s.get_range(&object_key(&key), 7..100).await.unwrap();
    assert_eq!(&r.bytes[..], b"789", "end past the size is clamped");
    assert_eq!(r.range, 7..10);

    let r = s.get_range(&object_key(&key), 0..1).await.unwrap();
    assert_eq!(&r.bytes[..], b"0");

    let whole = s.get_bytes(&object_key(&key)).await.unwrap();
    assert_eq!(&whole.bytes[..], b"0123456789");
    assert_eq!(whole.range, 0..10);

    let err = s.get_range(&object_key(&key), 10..12).await.unwrap_err();
    assert!(
        !err.is_retryable(),
        "a range past the end is permanent: {err:?}"
    );
}

pub async fn get_if_match(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/t", unique("if-match"));
    let w = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"abc"))
            .await
            .unwrap(),
    );
    let other = ETag::new("\"0000000000000000\"");

    let list = ConditionList::Tags(vec![other.clone(), w.e_tag.clone()]);
    let opts = GetOptions {
        if_match: Some(list),
        ..GetOptions::default()
    };
    match s.get_opts(&object_key(&key), opts).await.unwrap() {
        GetOutcome::Found(r) => {
            assert_eq!(&r.bytes[..], b"abc");
            assert_eq!(r.meta.e_tag, w.e_tag);
        }
        other => panic!("expected Found, got {other:?}"),
    }

    let opts = GetOptions {
        if_match: Some(ConditionList::one(other)),
        ..GetOptions::default()
    };
    assert_eq!(
        s.get_opts(&object_key(&key), opts).await.unwrap(),
        GetOutcome::PreconditionFailed
    );

    // If-Match uses the strong comparison: a weak tag never matches.
    let weak = ETag::new(format!("W/{}", w.e_tag.as_str()));
    let opts = GetOptions {
        if_match: Some(ConditionList::one(weak)),
        ..GetOptions::default()
    };
    assert_eq!(
        s.get_opts(&object_key(&key), opts).await.unwrap(),
        GetOutcome::PreconditionFailed
    );

    // `*` matches any existing object; a range under If-Match is served from that version.
    let opts = GetOptions {
        if_match: Some(ConditionList::Any),
        range: Some(1..2),
        ..GetOptions::default()
    };
    match s.get_opts(&object_key(&key), opts).await.unwrap() {
        GetOutcome::Found(r) => assert_eq!(&r.bytes[..], b"b"),
        other => panic!("expected Found, got {other:?}"),
    }
}

pub async fn get_if_none_match(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/t", unique("if-none-match"));
    let w = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"abc"))
            .await
            .unwrap(),
    );
    let other = ETag::new("\"0000000000000000\"");

    let opts = |c| GetOptions {
        if_none_match: Some(c),
        ..GetOptions::default()
    };
    assert_eq!(
        s.get_opts(&object_key(&key), opts(ConditionList::Any))
            .await
            .unwrap(),
        GetOutcome::NotModified
    );
    let list = ConditionList::Tags(vec![other.clone(), w.e_tag.clone()]);
    assert_eq!(
        s.get_opts(&object_key(&key), opts(list)).await.unwrap(),
        GetOutcome::NotModified
    );
    // If-None-Match uses the weak comparison: a weak form of the tag matches too.
    let weak = ETag::new(format!("W/{}", w.e_tag.as_str()));
    assert_eq!(
        s.get_opts(&object_key(&key), opts(ConditionList::one(weak)))
            .await
            .unwrap(),
        GetOutcome::NotModified
    );
    match s
        .get_opts(&object_key(&key), opts(ConditionList::one(other.clone())))
        .await
        .unwrap()
    {
        GetOutcome::Found(r) => assert_eq!(&r.bytes[..], b"abc"),
        o => panic!("expected Found, got {o:?}"),
    }

    // If-Match is evaluated first: a failing If-Match wins over a matching If-None-Match.
    let both = GetOptions {
        if_match: Some(ConditionList::one(other)),
        if_none_match: Some(ConditionList::Any),
        ..GetOptions::default()
    };
    assert_eq!(
        s.get_opts(&object_key(&key), both).await.unwrap(),
        GetOutcome::PreconditionFailed
    );
}

pub async fn conditional_delete(h: &dyn ObjectHarness) {
    let s = h.objects();
    let base = unique("delete");
    let key = format!("{base}/t");
    let w = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"x"))
            .await
            .unwrap(),
    );

    let wrong = DeleteOptions {
        if_match: Some(ETag::new("\"0000000000000000\"")),
    };
    assert_eq!(
        s.delete_opts(&object_key(&key), wrong).await.unwrap(),
        DeleteOutcome::Superseded
    );
    assert_eq!(head(&*s, &key).await.e_tag, w.e_tag, "mismatch deleted it");

    let right = DeleteOptions {
        if_match: Some(w.e_tag.clone()),
    };
    assert_eq!(
        s.delete_opts(&object_key(&key), right.clone())
            .await
            .unwrap(),
        DeleteOutcome::Deleted
    );
    assert!(s.head(&object_key(&key)).await.unwrap().is_none());
    assert_eq!(
        s.delete_opts(&object_key(&key), right).await.unwrap(),
        DeleteOutcome::NotFound
    );

    // Unconditional delete, then Create works again at the key.
    let key2 = format!("{base}/u");
    s.put_create(&object_key(&key2), Bytes::from_static(b"1"))
        .await
        .unwrap();
    assert_eq!(
        s.delete_opts(&object_key(&key2), DeleteOptions::default())
            .await
            .unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        s.delete_opts(&object_key(&key2), DeleteOptions::default())
            .await
            .unwrap(),
        DeleteOutcome::NotFound
    );
    written(
        s.put_create(&object_key(&key2), Bytes::from_static(b"2"))
            .await
            .unwrap(),
    );
    assert_eq!(bytes_at(&*s, &key2).await, b"2");
}

pub async fn list_under_prefix(h: &dyn ObjectHarness) {
    let s = h.objects();
    let p = unique("list");
    let keys = [
        format!("{p}/a/2/deep"),
        format!("{p}/a/1"),
        format!("{p}/ab"),
        format!("{p}/b/1"),
    ];
    let mut metas = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let body = Bytes::from(vec![b'x'; i + 1]);
        metas.push(written(s.put_create(&object_key(k), body).await.unwrap()));
    }
    let listed = s.list(&format!("{p}/a/")).await.unwrap();
    let got: Vec<&str> = listed.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(got, vec![format!("{p}/a/1"), format!("{p}/a/2/deep")]);
    // Metadata in the listing is the objects'.
    assert_eq!(listed[0].e_tag, metas[1].e_tag);
    assert_eq!(listed[0].size, 2);
    assert_eq!(listed[1].size, 1);

    // A plain string prefix, as S3's: `a` also matches `ab`.
    let got: Vec<String> = s
        .list(&format!("{p}/a"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(
        got,
        vec![
            format!("{p}/a/1"),
            format!("{p}/a/2/deep"),
            format!("{p}/ab")
        ]
    );
    let all = s.list(&format!("{p}/")).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.windows(2).all(|w| w[0].key < w[1].key), "not sorted");
    assert!(s.list(&format!("{p}/zzz")).await.unwrap().is_empty());
}

/// Start an upload that will be completed under `mode` (a store may fix the upload's
/// precondition when it starts it, as a GCS session does) and send `parts` in order.
async fn upload(
    s: &dyn ObjectStore,
    key: &str,
    mode: &PutMode,
    parts: &[Bytes],
) -> (String, Vec<PartId>) {
    let opts = PutOptions {
        mode: mode.clone(),
        ..PutOptions::default()
    };
    let id = s.create_multipart(&object_key(key), &opts).await.unwrap();
    let mut ids = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = u32::try_from(i + 1).unwrap();
        ids.push(
            s.upload_part(&object_key(key), &id, n, p.clone())
                .await
                .unwrap(),
        );
    }
    (id, ids)
}

pub async fn multipart_create_twice(h: &dyn ObjectHarness) {
    if unenforced(
        "objects::multipart_create_twice",
        h.caps().completion_unenforced,
    ) {
        return;
    }
    let s = h.objects();
    let key = format!("{}/scene.tif", unique("mpu"));
    let first = [part(h, b'a', 64), Bytes::from_static(b"tail-1")];
    let (id1, parts1) = upload(&*s, &key, &PutMode::Create, &first).await;
    let (id2, parts2) = upload(
        &*s,
        &key,
        &PutMode::Create,
        &[part(h, b'b', 64), Bytes::from_static(b"tail-2")],
    )
    .await;
    let listed: BTreeSet<String> = s
        .list_multipart(&key, None)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.upload_id)
        .collect();
    assert!(listed.contains(&id1) && listed.contains(&id2), "{listed:?}");

    let w = written(
        s.complete_multipart(&object_key(&key), &id1, &parts1, &PutMode::Create)
            .await
            .unwrap(),
    );
    let expected: Vec<u8> = first.iter().flat_map(|b| b.to_vec()).collect();
    assert_eq!(w.size, expected.len() as u64);
    let before = head(&*s, &key).await;
    assert_eq!(before.e_tag, w.e_tag);

    tokio::time::sleep(h.caps().last_modified_resolution).await;
    let second = s
        .complete_multipart(&object_key(&key), &id2, &parts2, &PutMode::Create)
        .await;
    match second {
        Ok(PutOutcome::AlreadyPresent) => {}
        other => panic!("expected AlreadyPresent, got {other:?}"),
    }
    let after = head(&*s, &key).await;
    assert_eq!(after.e_tag, before.e_tag);
    assert_eq!(after.last_modified, before.last_modified);
    assert_eq!(bytes_at(&*s, &key).await, expected);
    // Whatever the outcome, a completed upload is no longer listed as incomplete.
    let left: Vec<String> = s
        .list_multipart(&key, None)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.upload_id)
        .filter(|u| u == &id1)
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The loser cleans up its upload if the backend kept it.
    let _ = s.abort_multipart(&object_key(&key), &id2).await;
}

pub async fn multipart_update_honours_etag(h: &dyn ObjectHarness) {
    if unenforced(
        "objects::multipart_update_honours_etag",
        h.caps().completion_unenforced,
    ) {
        return;
    }
    let s = h.objects();
    let key = format!("{}/scene.tif", unique("mpu-update"));
    let v1 = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"v1"))
            .await
            .unwrap(),
    );

    let update = PutMode::Update(UpdateVersion::from(&v1));
    let (id, parts) = upload(
        &*s,
        &key,
        &update,
        &[part(h, b'c', 32), Bytes::from_static(b"!")],
    )
    .await;
    let v2 = written(
        s.complete_multipart(&object_key(&key), &id, &parts, &update)
            .await
            .unwrap(),
    );
    assert_ne!(v2.e_tag, v1.e_tag);

    let (id, parts) = upload(&*s, &key, &update, &[Bytes::from_static(b"stale")]).await;
    let out = s
        .complete_multipart(&object_key(&key), &id, &parts, &update)
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::Superseded);
    assert_eq!(head(&*s, &key).await.e_tag, v2.e_tag);
    let _ = s.abort_multipart(&object_key(&key), &id).await;
}

/// Parts uploaded out of order, a part uploaded again under its number (the later bytes win),
/// a stale part ETag refused, and completion with a subset of the uploaded parts.
pub async fn multipart_parts_out_of_order_and_replaced(h: &dyn ObjectHarness) {
    if !h.caps().parts_in_any_order {
        skip(
            "objects::multipart_parts_out_of_order_and_replaced",
            "this store takes parts in order, once each (and refuses others with an error)",
        );
        return;
    }
    let s = h.objects();
    let key = format!("{}/scene.tif", unique("mpu-order"));
    let id = s
        .create_multipart(&object_key(&key), &PutOptions::create())
        .await
        .unwrap();
    let p2 = s
        .upload_part(&object_key(&key), &id, 2, part(h, b'2', 8))
        .await
        .unwrap();
    let p1_old = s
        .upload_part(&object_key(&key), &id, 1, part(h, b'x', 8))
        .await
        .unwrap();
    let p3 = s
        .upload_part(&object_key(&key), &id, 3, Bytes::from_static(b"tail"))
        .await
        .unwrap();
    let p1 = s
        .upload_part(&object_key(&key), &id, 1, part(h, b'1', 8))
        .await
        .unwrap();
    assert_ne!(p1.e_tag, p1_old.e_tag);
    // The replaced part's ETag no longer names an uploaded part.
    let stale = s
        .complete_multipart(
            &object_key(&key),
            &id,
            &[p1_old, p2.clone()],
            &PutMode::Create,
        )
        .await;
    assert!(stale.is_err(), "completed with a replaced part: {stale:?}");
    // Parts 1 and 2 only: part 3 was uploaded but is not named.
    written(
        s.complete_multipart(&object_key(&key), &id, &[p1, p2], &PutMode::Create)
            .await
            .unwrap(),
    );
    let mut expected = part(h, b'1', 8).to_vec();
    expected.extend_from_slice(&part(h, b'2', 8));
    assert_eq!(bytes_at(&*s, &key).await, expected);
    let _ = p3;
}

/// The in-order case every uploader produces: many parts, then exactly those completed.
pub async fn multipart_in_order_parts(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/scene.tif", unique("mpu-seq"));
    let parts = [
        part(h, b'a', 4),
        part(h, b'b', 4),
        part(h, b'c', 4),
        Bytes::from_static(b"z"),
    ];
    let (id, ids) = upload(&*s, &key, &PutMode::Create, &parts).await;
    let w = written(
        s.complete_multipart(&object_key(&key), &id, &ids, &PutMode::Create)
            .await
            .unwrap(),
    );
    let expected: Vec<u8> = parts.iter().flat_map(|b| b.to_vec()).collect();
    assert_eq!(w.size, expected.len() as u64);
    assert_eq!(bytes_at(&*s, &key).await, expected);
    assert_eq!(head(&*s, &key).await.e_tag, w.e_tag);
    assert!(
        s.list_multipart(&key, None)
            .await
            .unwrap()
            .iter()
            .all(|u| u.upload_id != id)
    );
}

pub async fn multipart_abort(h: &dyn ObjectHarness) {
    let s = h.objects();
    let key = format!("{}/scene.tif", unique("mpu-abort"));
    let (id, parts) = upload(
        &*s,
        &key,
        &PutMode::Create,
        &[Bytes::from_static(b"doomed")],
    )
    .await;
    s.abort_multipart(&object_key(&key), &id).await.unwrap();
    assert!(
        s.list_multipart(&key, None)
            .await
            .unwrap()
            .iter()
            .all(|u| u.upload_id != id)
    );
    let err = s
        .complete_multipart(&object_key(&key), &id, &parts, &PutMode::Create)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    assert!(s.head(&object_key(&key)).await.unwrap().is_none());
    let err = s
        .upload_part(&object_key(&key), &id, 2, Bytes::from_static(b"late"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
}

pub async fn list_multipart_older_than(h: &dyn ObjectHarness) {
    let s = h.objects();
    let p = unique("mpu-list");
    let key_a = format!("{p}/a.tif");
    let key_b = format!("{p}/b.tif");
    let other = format!("{}/c.tif", unique("mpu-other"));
    let id_a = s
        .create_multipart(&object_key(&key_a), &PutOptions::default())
        .await
        .unwrap();
    let id_b = s
        .create_multipart(&object_key(&key_b), &PutOptions::default())
        .await
        .unwrap();
    let id_c = s
        .create_multipart(&object_key(&other), &PutOptions::default())
        .await
        .unwrap();

    let all = s.list_multipart(&format!("{p}/"), None).await.unwrap();
    let mut got: Vec<(String, String)> = all
        .iter()
        .map(|u| (u.key.clone(), u.upload_id.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(key_a.clone(), id_a.clone()), (key_b.clone(), id_b.clone())]
    );
    let now = SystemTime::now();
    for u in &all {
        let age = now.duration_since(u.initiated).unwrap_or_default();
        assert!(age < Duration::from_secs(600), "initiated {age:?} ago");
    }

    let hour_ago = now - Duration::from_secs(3600);
    assert!(
        s.list_multipart(&format!("{p}/"), Some(hour_ago))
            .await
            .unwrap()
            .is_empty(),
        "fresh uploads listed as older than an hour"
    );
    let soon = now + Duration::from_secs(60);
    assert_eq!(
        s.list_multipart(&format!("{p}/"), Some(soon))
            .await
            .unwrap()
            .len(),
        2
    );
    for (k, id) in [(&key_a, &id_a), (&key_b, &id_b), (&other, &id_c)] {
        s.abort_multipart(&object_key(k), id).await.unwrap();
    }
    assert!(
        s.list_multipart(&format!("{p}/"), None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Keys that no store may be handed are refused where a key is made ([`ObjectKey::parse`]):
/// the store's methods take nothing else, so none of them reaches a store. What a store still
/// reads as a plain string, a list prefix, it refuses itself with `InvalidKey`.
pub async fn invalid_keys_refused(h: &dyn ObjectHarness) {
    let s = h.objects();
    let p = unique("invalid");
    let bad = [
        String::new(),
        format!("{p}/../escape"),
        format!("{p}/./x"),
        format!("{p}//x"),
        format!("/{p}/abs"),
        format!("{p}/trailing/"),
        format!("{p}/sp ace"),
        format!("{p}/back\\slash"),
        format!("{p}/nul\0"),
        format!("{p}/{}", "a".repeat(200)),
        // The segment every store keeps for its own state.
        format!("{}/x", tilegate_core::keys::STORE_RESERVED),
    ];
    for key in &bad {
        let e = ObjectKey::checked(key).unwrap_err();
        assert!(matches!(e, StoreError::InvalidKey { .. }), "{key:?}: {e:?}");
        assert!(!e.is_retryable());
    }
    for prefix in [
        format!("{p}/../"),
        format!("/{p}/"),
        format!("{p}/sp ace"),
        format!("{p}//"),
    ] {
        let e = s.list(&prefix).await.unwrap_err();
        assert!(
            matches!(e, StoreError::InvalidKey { .. }),
            "list {prefix:?}: {e:?}"
        );
        let e = s.list_multipart(&prefix, None).await.unwrap_err();
        assert!(
            matches!(e, StoreError::InvalidKey { .. }),
            "list_multipart {prefix:?}: {e:?}"
        );
    }
    assert!(s.list(&format!("{p}/")).await.unwrap().is_empty());
}

/// 32 writers Create one key with different bytes at once: exactly one wins, and the stored
/// bytes are the winner's.
pub async fn race_create_same_key(h: &dyn ObjectHarness) {
    const WRITERS: usize = 32;
    let s = h.objects();
    let key = format!("{}/tile.tif", unique("race-create"));
    let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let (s, key, barrier) = (Arc::clone(&s), key.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            let body = Bytes::from(format!("writer {i:02} ").repeat(1000));
            barrier.wait().await;
            (i, s.put_create(&object_key(&key), body).await.unwrap())
        }));
    }
    let mut winners = Vec::new();
    let mut present = 0;
    for t in tasks {
        match t.await.unwrap() {
            (i, PutOutcome::Written(m)) => winners.push((i, m)),
            (_, PutOutcome::AlreadyPresent) => present += 1,
            (_, other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(present, WRITERS - 1);
    let (i, meta) = &winners[0];
    assert_eq!(
        bytes_at(&*s, &key).await,
        format!("writer {i:02} ").repeat(1000).into_bytes()
    );
    assert_eq!(head(&*s, &key).await.e_tag, meta.e_tag);
}

/// Read the counter object and its ETag, then `Update` it with value + 1, until Written.
/// Returns how many attempts were refused.
async fn cas_increment(s: &dyn ObjectStore, key: &str) -> u32 {
    let mut refused = 0;
    loop {
        let cur = s.get_bytes(&object_key(key)).await.unwrap();
        let n: u64 = std::str::from_utf8(&cur.bytes).unwrap().parse().unwrap();
        let next = Bytes::from((n + 1).to_string());
        match s
            .put_update(&object_key(key), next, UpdateVersion::from(&cur.meta))
            .await
            .unwrap()
        {
            PutOutcome::Written(_) => return refused,
            PutOutcome::Superseded => refused += 1,
            PutOutcome::AlreadyPresent => panic!("Update answered AlreadyPresent"),
        }
    }
}

/// 8 tasks × 25 compare-and-swap increments: the final count is exactly 200.
pub async fn race_cas_counter(h: &dyn ObjectHarness) {
    const TASKS: u64 = 8;
    const EACH: u64 = 25;
    let s = h.objects();
    let key = format!("{}/counter", unique("race-cas"));
    written(
        s.put_create(&object_key(&key), Bytes::from_static(b"0"))
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (s, key) = (Arc::clone(&s), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut refused = 0;
            for _ in 0..EACH {
                refused += cas_increment(&*s, &key).await;
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.unwrap();
    }
    assert_eq!(
        bytes_at(&*s, &key).await,
        (TASKS * EACH).to_string().into_bytes()
    );
    eprintln!("cas counter: {refused} refused updates (precondition working)");
}

/// 4 processes Create one key at once: exactly one `written`.
pub async fn race_create_cross_process(h: &dyn ObjectHarness) {
    let Some(urls) = h.child_urls().filter(|_| h.caps().cross_process) else {
        skip(
            "objects::race_create_cross_process",
            "no cross-process helper for this backend",
        );
        return;
    };
    let s = h.objects();
    let key = format!("{}/tile.tif", unique("xproc-create"));
    let dir = crate::tempdir();
    let args: Vec<Vec<String>> = (0..4)
        .map(|i| vec!["create-race".into(), key.clone(), format!("process-{i}")])
        .collect();
    let outcomes = crate::child::run_children(&urls, args, &dir.path().join("go")).await;
    let last: Vec<&str> = outcomes
        .iter()
        .map(|o| o.last().map(String::as_str).unwrap_or_default())
        .collect();
    let winners: Vec<usize> = last
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == "written")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(winners.len(), 1, "outcomes: {last:?}");
    assert_eq!(
        last.iter().filter(|o| **o == "already-present").count(),
        3,
        "{last:?}"
    );
    assert_eq!(
        bytes_at(&*s, &key).await,
        format!("process-{}", winners[0]).into_bytes()
    );
}

/// 4 processes × 25 compare-and-swap increments of one object: exactly 100.
pub async fn race_cas_counter_cross_process(h: &dyn ObjectHarness) {
    let Some(urls) = h.child_urls().filter(|_| h.caps().cross_process) else {
        skip(
            "objects::race_cas_counter_cross_process",
            "no cross-process helper for this backend",
        );
        return;
    };
    let s = h.objects();
    let key = format!("{}/counter", unique("xproc-cas"));
    written(
        s.put_create(&object_key(&key), Bytes::from_static(b"0"))
            .await
            .unwrap(),
    );
    let dir = crate::tempdir();
    let args: Vec<Vec<String>> = (0..4)
        .map(|_| vec!["cas-increment".into(), key.clone(), "25".into()])
        .collect();
    let outcomes = crate::child::run_children(&urls, args, &dir.path().join("go")).await;
    for o in &outcomes {
        assert!(o.last().is_some_and(|l| l.starts_with("done")), "{o:?}");
    }
    assert_eq!(bytes_at(&*s, &key).await, b"100");
}

/// A write whose first attempt landed but whose answer was lost is refused when the store
/// sends it again; the store reads the object back and its attempt token tells its own write
/// (`Written`) from another's (`AlreadyPresent`, `Superseded`). The loss is real: a proxy
/// forwards the request to the server and closes the client's connection unanswered.
pub async fn lost_answer_is_told_apart(h: &dyn ObjectHarness) {
    let upstream = match h.upstream() {
        Ok(u) => u,
        Err(why) => {
            skip("objects::lost_answer_is_told_apart", why);
            return;
        }
    };
    let proxy = crate::lossy::LossyProxy::start(&upstream).await;
    let lossy = h.objects_via(&proxy.url).await;
    let s = h.objects();
    let p = unique("lost-answer");

    // Its own write: Written, the bytes are its own, one answer was lost.
    let key = format!("{p}/mine.tif");
    proxy.lose_next_writes(1);
    let w = written(
        lossy
            .put_create(&object_key(&key), Bytes::from_static(b"mine"))
            .await
            .unwrap(),
    );
    assert_eq!(
        proxy.lost(),
        1,
        "the proxy lost no answer: {:?}",
        proxy.seen()
    );
    assert_eq!(bytes_at(&*s, &key).await, b"mine");
    assert_eq!(head(&*s, &key).await.e_tag, w.e_tag);

    // Another's object: the lost first attempt was refused too, and so is the resend.
    let key = format!("{p}/theirs.tif");
    let theirs = written(
        s.put_create(&object_key(&key), Bytes::from_static(b"theirs"))
            .await
            .unwrap(),
    );
    proxy.lose_next_writes(1);
    let out = lossy
        .put_create(&object_key(&key), Bytes::from_static(b"mine"))
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::AlreadyPresent);
    assert_eq!(proxy.lost(), 2);
    assert_eq!(head(&*s, &key).await.e_tag, theirs.e_tag);

    // An Update whose answer was lost: the resend's If-Match is stale, yet it was this write.
    let key = format!("{p}/mine.tif");
    proxy.lose_next_writes(1);
    let v2 = written(
        lossy
            .put_update(
                &object_key(&key),
                Bytes::from_static(b"mine v2"),
                UpdateVersion::from(&w),
            )
            .await
            .unwrap(),
    );
    assert_eq!(proxy.lost(), 3);
    assert_eq!(bytes_at(&*s, &key).await, b"mine v2");
    assert_eq!(head(&*s, &key).await.e_tag, v2.e_tag);
}
