"""``gpumemlab certificate keygen|issue|verify``: argument parsing and the three commands.

Handlers return the exit status and raise ``CertificateError`` for anything the user must fix;
the CLI layer (``gpumemlab.cli.classroom``) turns that into one line and exit status 2.

    gpumemlab certificate keygen --out keys/
    gpumemlab certificate issue --grades grades.csv --key keys/certificate_signing_key.pem \\
        --course "GPU memory 101" --threshold 0.8 --out certificates/
    gpumemlab certificate verify certificates/alice.html --key certificate_signing_key.pub.pem
"""
from __future__ import annotations

import sys
from pathlib import Path


def add_parser(subparsers, func) -> None:
    c = subparsers.add_parser("certificate", help="sign, issue and verify course certificates",
                              description="Ed25519-signed course certificates (HTML + PNG).")
    sub = c.add_subparsers(dest="certificate_command", metavar="ACTION", required=True)

    k = sub.add_parser("keygen", help="make the teacher's signing key pair",
                       description="Write an Ed25519 private key (mode 0600) and its public "
                       "key as PEM files. Publish the public key; keep the private one.")
    k.add_argument("--out", type=Path, default=Path("."), help="folder for the two PEM files")
    k.add_argument("--force", action="store_true", help="replace existing key files")
    k.set_defaults(func=func, certificate_func=_keygen)

    i = sub.add_parser("issue", help="sign certificates for passing students of a grades CSV",
                       description="One signed certificate (HTML, PNG, JSON) per student whose "
                       "total score/max_score reaches the threshold, plus certificates.csv.")
    i.add_argument("--grades", type=Path, required=True, help="nbgrader grades CSV")
    i.add_argument("--key", type=Path, required=True, help="teacher's private key (PEM)")
    i.add_argument("--course", required=True, help="course name printed on the certificate")
    add_issue_options(i)
    i.add_argument("--out", type=Path, default=Path("certificates"), help="output folder")
    i.add_argument("--assignment", default=None, help="only this assignment's rows "
                   "(default: course total over every assignment)")
    i.set_defaults(func=func, certificate_func=_issue)

    v = sub.add_parser("verify", help="check a certificate against the teacher's public key",
                       description="Exit status 0: valid; 1: invalid, edited or unsigned; "
                       "2: not a certificate or unusable key.")
    v.add_argument("file", type=Path, help="certificate .html, .json or .png")
    v.add_argument("--key", type=Path, required=True, help="teacher's public key (PEM)")
    v.set_defaults(func=func, certificate_func=_verify)


def add_issue_options(parser) -> None:
    parser.add_argument("--threshold", default="0.8",
                        help="pass mark as a fraction of max_score (0.8) or a percentage (80%%)")
    parser.add_argument("--issuer", default="", help="teacher's name shown as the signer")
    parser.add_argument("--date", default=None, help="date on the certificates (YYYY-MM-DD, "
                        "default today)")
    parser.add_argument("--no-png", action="store_true", help="write HTML and JSON only")


def run(args) -> int:
    return args.certificate_func(args)


def _keygen(args) -> int:
    from gpumemlab.certificates.record import generate_keypair, key_fingerprint

    priv, pub = generate_keypair(args.out, overwrite=args.force)
    print(f"private key: {priv} (mode 0600, keep it secret)\npublic key:  {pub} (publish it)\n"
          f"fingerprint: {key_fingerprint(pub)}")
    return 0


def _issue(args) -> int:
    rows = issue_grades(args, args.grades, args.course, args.key, args.out, args.assignment)
    issued = sum(r["issued"] == "yes" for r in rows)
    print(f"issued {issued} certificate{'s' * (issued != 1)} for {len(rows)} student"
          f"{'s' * (len(rows) != 1)} in {args.out} (index: {args.out / 'certificates.csv'})")
    return 0


def issue_grades(args, grades, course, key, out, assignment=None) -> list:
    """Shared by ``certificate issue`` and ``grade --certificates-key``."""
    from gpumemlab.certificates.issue import issue_from_grades

    return issue_from_grades(grades, key, course, threshold=args.threshold, out=out,
                             issuer=args.issuer, date=args.date, assignment=assignment,
                             png=not args.no_png, progress=sys.stderr)


def _verify(args) -> int:
    from gpumemlab.certificates.record import verify_certificate

    result = verify_certificate(args.file, args.key)
    print(result.line())
    return 0 if result.valid else 1
