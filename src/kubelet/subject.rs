//! The user a client certificate names, as Kubernetes reads it: the subject's common name is the
//! user, each organization a group. Read with a small DER walker after the chain was verified;
//! still bounded, as any DER is.

/// One DER element: (tag, contents, the rest after it).
pub(crate) fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let mut l = 0usize;
        for &x in &b[..n] {
            l = (l << 8) | usize::from(x);
        }
        b = &b[n..];
        l
    };
    if b.len() < len {
        return None;
    }
    Some((tag, &b[..len], &b[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const CN: &[u8] = &[0x55, 0x04, 0x03];
const O: &[u8] = &[0x55, 0x04, 0x0a];

/// The common name and the organizations of a certificate's subject (DER).
pub fn user_of(cert_der: &[u8]) -> Option<(String, Vec<String>)> {
    let (SEQUENCE, cert, _) = element(cert_der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(cert)? else {
        return None;
    };
    let mut rest = tbs;
    // version [0] is optional; then serial, signature algorithm, issuer, validity, subject.
    let (tag, _, r) = element(rest)?;
    rest = r;
    if tag == 0xa0 {
        rest = element(rest)?.2;
    }
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, mut name, _) = element(rest)? else {
        return None;
    };
    let (mut cn, mut orgs) = (None, Vec::new());
    while !name.is_empty() {
        let (SET, mut rdn, r) = element(name)? else {
            return None;
        };
        name = r;
        while !rdn.is_empty() {
            let (SEQUENCE, atv, r) = element(rdn)? else {
                return None;
            };
            rdn = r;
            let (OID, oid, value) = element(atv)? else {
                return None;
            };
            let (_, text, _) = element(value)?;
            let text = String::from_utf8(text.to_vec()).ok()?;
            if oid == CN {
                cn = Some(text);
            } else if oid == O {
                orgs.push(text);
            }
        }
    }
    Some((cn?, orgs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, orgs: &[&str]) -> Vec<u8> {
        let mut p = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        for o in orgs {
            dn.push(rcgen::DnType::OrganizationName, *o);
        }
        dn.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag, content.len() as u8];
        v.extend_from_slice(content);
        v
    }

    fn attr(oid: &[u8], text: &str) -> Vec<u8> {
        let atv = [tlv(OID, oid), tlv(0x0c, text.as_bytes())].concat();
        tlv(SET, &tlv(SEQUENCE, &atv))
    }

    #[test]
    fn common_name_is_the_user_and_organizations_the_groups() {
        assert_eq!(
            user_of(&cert("system:node:a", &["system:nodes"])),
            Some(("system:node:a".into(), vec!["system:nodes".into()]))
        );
        // Several organizations (rcgen keeps one per type): a certificate built by hand.
        let subject = [
            attr(O, "system:masters"),
            attr(O, "dev"),
            attr(&[0x55, 0x04, 0x06], "DE"),
            attr(CN, "alice"),
        ]
        .concat();
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &subject),
        ]
        .concat();
        let der = tlv(SEQUENCE, &tlv(SEQUENCE, &tbs));
        assert_eq!(
            user_of(&der),
            Some(("alice".into(), vec!["system:masters".into(), "dev".into()]))
        );
    }

    #[test]
    fn truncated_or_garbage_der_is_none() {
        let c = cert("u", &[]);
        for n in [0, 1, 5, c.len() / 2] {
            assert_eq!(user_of(&c[..n]), None);
        }
        assert_eq!(user_of(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(user_of(b"garbage"), None);
    }
}
