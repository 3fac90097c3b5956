"""The soak's child processes share its database, so they must be able to read
what it wrote there: API keys (pepper) and sealed node tokens (the secret-box
keys). A child with its own var/ would generate a different box key, fail to
open every node token and route nowhere (every call a 503)."""

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings

from console.crypto import seal
from console.soak.cluster import Cluster, Proc


def test_the_soak_children_open_the_node_tokens_the_soak_sealed(tmp_path):
    cluster = Cluster(workdir=tmp_path, database_url="postgres://x/y", redis_url="redis://x/0")
    cluster.broker = Proc("broker", [], {}, tmp_path / "broker.log", port=6390)
    env = cluster.env()
    assert env["CONSOLE_VAR_DIR"] != str(settings.VAR_DIR)  # children have their own var/ …
    child_box = MultiFernet([Fernet(k.encode()) for k in env["CONSOLE_SECRET_KEYS"].split(",")])
    # … yet open what the soak sealed, and check keys with the same pepper.
    assert child_box.decrypt(seal("soak-node-token").encode()).decode() == "soak-node-token"
    assert env["API_KEY_PEPPER"] == settings.API_KEY_PEPPER
