"""`locsum serve`: summarization as an HTTP service (FastAPI on uvicorn; `pip install 'locsum[serve]'`).

`create_app(bundle, ServeOptions(...))` is the ASGI app, for `locsum serve` or to mount in a service of your own.
Each request's memory estimate is reserved against the server's budget before any model work (`admission`).
"""

from .app import create_app
from .options import ServeOptions

__all__ = ["ServeOptions", "create_app"]
