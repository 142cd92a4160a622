"""Static text of the demo data set: the commit diffs and the incident-triage runbook skill.

Plain constants only; `data.py` writes them to disk and the tools serve them from there.
"""

from __future__ import annotations

RUNBOOK_MD = """\
---
name: incident-triage-runbook
description: How Acme Shop's on-call triages production pages - deploys first, logs last.
---
# Incident triage runbook

1. List the open incidents. Pages that fire within 30 minutes of each other often share a cause;
   count causes, not pages.
2. Check the recent deploys (last 24 h) for every paged service BEFORE opening any log.
3. Pull metrics for each paged service: latency p99, error rate, database connections.
   `orders-db` is shared by inventory, checkout, cart and payments (200 connections in total).
4. Read the diff of any deploy that landed shortly before a page.
5. A paged service with no deploy is often a symptom: look for a shared dependency that another
   service exhausted, and name that service as the cause.
6. Only then confirm in `app.log` (~16 MB, mounted at /mnt/session/uploads/app.log): use
   `grep -c` for counts, never read the whole file.
7. Write a short post-mortem to /mnt/session/outputs/postmortem.md: per page, cause or symptom,
   the evidence, and the rollback.
"""

_INVENTORY_CACHE = """\
commit c81d4e7f0a2b9e61d3c8a4f5b7e9012d3c4b5a6f
Author: Dana Ruiz <dana.ruiz@acme.example>
Date:   2026-04-22T01:41:09Z

    remove product cache (cache layer moves to CDN edge)

diff --git a/inventory/catalog/products.py b/inventory/catalog/products.py
index 4e1a2b7..9d03f58 100644
--- a/inventory/catalog/products.py
+++ b/inventory/catalog/products.py
@@ -1,15 +1,9 @@
 from inventory.db import orders_db
-from inventory.cache import ProductCache
 from inventory.models import Product
\x20
 PRODUCT_BY_SKU = "SELECT * FROM products WHERE sku = %s"
-_cache = ProductCache(ttl_seconds=300, max_items=50_000)
\x20
\x20
 def get_product(sku: str) -> Product:
-    cached = _cache.get(sku)
-    if cached is not None:
-        return cached
-    product = Product.from_row(orders_db.fetch_one(PRODUCT_BY_SKU, (sku,)))
-    _cache.put(sku, product)
-    return product
+    # The cache layer moves to the CDN edge (INFRA-812); read through to the database.
+    return Product.from_row(orders_db.fetch_one(PRODUCT_BY_SKU, (sku,)))
diff --git a/inventory/settings.py b/inventory/settings.py
index 77c0d1e..2b4f9aa 100644
--- a/inventory/settings.py
+++ b/inventory/settings.py
@@ -12,4 +12,2 @@ DB_POOL_SIZE = 40
 DB_TIMEOUT_MS = 5000
-PRODUCT_CACHE_TTL_SECONDS = 300
-PRODUCT_CACHE_MAX_ITEMS = 50_000
 LOG_LEVEL = "INFO"
"""

_CHECKOUT_N_PLUS_ONE = """\
commit a3f9c21b4d6e8f0a1c3e5b7d9f1a2c4e6b8d0f13
Author: Jo Martin <jo.martin@acme.example>
Date:   2026-04-22T01:33:51Z

    per-order lookup of reservations for fresher stock state

diff --git a/checkout/orders/reservations.py b/checkout/orders/reservations.py
index 1f0c9d2..e47ab35 100644
--- a/checkout/orders/reservations.py
+++ b/checkout/orders/reservations.py
@@ -38,10 +38,11 @@ from checkout.db import orders_db
 def load_reservations(order_ids: list[str]) -> dict[str, list[Reservation]]:
     \"\"\"Reservations of every order in the batch, keyed by order id.\"\"\"
-    rows = orders_db.fetch_all(
-        "SELECT order_id, sku, qty FROM reservations WHERE order_id = ANY(%s)",
-        (order_ids,),
-    )
-    result: dict[str, list[Reservation]] = defaultdict(list)
-    for row in rows:
-        result[row.order_id].append(Reservation.from_row(row))
-    return result
+    result: dict[str, list[Reservation]] = {}
+    for order_id in order_ids:
+        # Per-order lookup so each order sees fresh reservation state (CHK-431).
+        rows = orders_db.fetch_all(
+            "SELECT order_id, sku, qty FROM reservations WHERE order_id = %s",
+            (order_id,),
+        )
+        result[order_id] = [Reservation.from_row(row) for row in rows]
+    return result
"""

_SMALL = {
    "e19f0c3": (
        "cart/flags.py",
        "Mina Park <mina.park@acme.example>",
        "2026-04-20T10:51:30Z",
        "add promo banner feature flag",
        ' FLAGS = {\n     "express_checkout": True,\n+    "promo_banner": False,\n }\n',
    ),
    "5be01a9": (
        "inventory/requirements.txt",
        "Li Wei <li.wei@acme.example>",
        "2026-04-21T16:22:04Z",
        "bump structlog to 24.1",
        " psycopg[binary]==3.1.18\n-structlog==23.3.0\n+structlog==24.1.0\n",
    ),
    "9c0d5e2": (
        "payments/webhooks/tls.py",
        "Sam Okafor <sam.okafor@acme.example>",
        "2026-04-21T20:02:47Z",
        "rotate webhook TLS certificate",
        ' CERT_PATH = "/etc/payments/tls"\n-CERT_NAME = "webhooks-2025.pem"\n'
        '+CERT_NAME = "webhooks-2026.pem"\n',
    ),
    "7d2e6b0": (
        "checkout/templates/receipt.txt",
        "Jo Martin <jo.martin@acme.example>",
        "2026-04-21T21:58:13Z",
        "update receipt email copy",
        " Hi {name},\n-Thanks for your order!\n+Thanks for shopping with Acme!\n",
    ),
    "4f8a2d1": (
        "search/ranking.yaml",
        "Li Wei <li.wei@acme.example>",
        "2026-04-22T00:21:40Z",
        "tune search ranking weights",
        " weights:\n-  title: 2.0\n+  title: 2.4\n   popularity: 1.0\n",
    ),
}


def _small_diff(commit: str, path: str, author: str, date: str, title: str, body: str) -> str:
    minus = sum(1 for line in body.splitlines() if not line.startswith("+"))
    plus = sum(1 for line in body.splitlines() if not line.startswith("-"))
    return (
        f"commit {commit}{'0' * 33}\nAuthor: {author}\nDate:   {date}\n\n    {title}\n\n"
        f"diff --git a/{path} b/{path}\nindex 0a1b2c3..3c2b1a0 100644\n--- a/{path}\n"
        f"+++ b/{path}\n@@ -1,{minus} +1,{plus} @@\n{body}"
    )


DIFFS: dict[str, str] = {
    "c81d4e7": _INVENTORY_CACHE,
    "a3f9c21": _CHECKOUT_N_PLUS_ONE,
    **{commit: _small_diff(commit, *parts) for commit, parts in _SMALL.items()},
}
"""Unified diff (with a `git show` header) of every deploy's commit, keyed by short hash."""
