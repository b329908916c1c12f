use super::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("podunit-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn put_blob(s: &Store, bytes: &[u8]) -> Digest {
    let d = Digest::of(bytes);
    let p = s.blob_path(&d);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
    d
}

/// A one-layer image stored by hand, as `write` lays it out.
fn fixture(s: &Store, r: &Reference) -> (Digest, Digest) {
    let diff = Digest::of(b"layer");
    std::fs::create_dir_all(s.layer_path(&diff).join("bin")).unwrap();
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{"Entrypoint":["/bin/sh"],"User":"app"}},"rootfs":{{"type":"layers","diff_ids":["{diff}"]}}}}"#
    );
    let c = put_blob(s, config.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{c}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":5}}]}}"#,
        config.len(),
        Digest::of(b"gz")
    );
    let m = put_blob(s, manifest.as_bytes());
    let rec = RefRecord {
        reference: r.to_string(),
        digest: m.clone(),
        manifest: m.clone(),
    };
    let p = s.ref_path(r);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, serde_json::to_vec(&rec).unwrap()).unwrap();
    (m, c)
}

#[test]
fn lookup_finds_a_complete_image() {
    let s = Store::open(scratch("complete"));
    let r = Reference::parse("busybox:1.36").unwrap();
    assert_eq!(s.lookup(&r).unwrap(), None);
    let (m, c) = fixture(&s, &r);
    let img = s.lookup(&r).unwrap().unwrap();
    assert_eq!(img.digest, m);
    assert_eq!(img.config_digest, c);
    assert_eq!(img.config.config.user.as_deref(), Some("app"));
    assert_eq!(img.layers, vec![s.layer_path(&Digest::of(b"layer"))]);
    assert_eq!(img.image_id(), format!("docker.io/library/busybox@{m}"));
    assert!(
        s.ref_path(&r)
            .ends_with("refs/docker.io/library/busybox/_tags/1.36")
    );
    let (recs, errs) = s.list();
    assert!(errs.is_empty());
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].reference, "docker.io/library/busybox:1.36");
    // Other tags of the same repository are not there.
    assert_eq!(
        s.lookup(&Reference::parse("busybox").unwrap()).unwrap(),
        None
    );
}

#[test]
fn a_missing_layer_means_not_present() {
    let s = Store::open(scratch("missing-layer"));
    let r = Reference::parse("reg.example:5000/app").unwrap();
    fixture(&s, &r);
    std::fs::remove_dir_all(s.layer_path(&Digest::of(b"layer"))).unwrap();
    assert_eq!(s.lookup(&r).unwrap(), None);
}

#[test]
fn a_damaged_blob_is_never_trusted() {
    let s = Store::open(scratch("damaged"));
    let r = Reference::parse("app").unwrap();
    let (_, c) = fixture(&s, &r);
    let p = s.blob_path(&c);
    let mut b = std::fs::read(&p).unwrap();
    b[0] = b' ';
    std::fs::write(&p, b).unwrap();
    let e = s.lookup(&r).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt(..)), "{e}");
    assert!(e.to_string().contains(c.hex()), "{e}");
}

#[test]
fn digest_records_must_match_their_name() {
    let s = Store::open(scratch("digest-ref"));
    let (m, _) = fixture(&s, &Reference::parse("app").unwrap());
    let pinned = Reference::parse(&format!("app@{m}")).unwrap();
    assert_eq!(s.lookup(&pinned).unwrap(), None);
    let other = Digest::of(b"other");
    let rec = RefRecord {
        reference: pinned.to_string(),
        digest: other,
        manifest: m,
    };
    let p = s.ref_path(&pinned);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, serde_json::to_vec(&rec).unwrap()).unwrap();
    assert!(matches!(s.lookup(&pinned), Err(StoreError::Corrupt(..))));
}
