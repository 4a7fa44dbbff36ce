# A build backend of its own (PEP 517), so that pip installs this package
# without fetching setuptools: it zips devhook_dep into a wheel.
import base64, hashlib, os, zipfile

NAME, VERSION = "devhook_dep", "1.0"
DIST = f"{NAME}-{VERSION}.dist-info"

def _files():
    meta = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
    wheel = "Wheel-Version: 1.0\nGenerator: devhook-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {f"{DIST}/METADATA": meta.encode(), f"{DIST}/WHEEL": wheel.encode()}
    for root, _, names in os.walk(NAME):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                files[p.replace(os.sep, "/")] = f.read()
    return files

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    files = _files()
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for p, b in files.items():
            z.writestr(p, b)
            digest = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
            record.append(f"{p},sha256={digest},{len(b)}")
        record.append(f"{DIST}/RECORD,,")
        z.writestr(f"{DIST}/RECORD", "\n".join(record) + "\n")
    return name
