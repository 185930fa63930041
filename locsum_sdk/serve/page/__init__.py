"""The page `locsum serve` serves at `/`: plain HTML, CSS and JavaScript shipped in the package (no build step, no
network), which calls the API like any client (`POST /v1/summarize`, streamed) and shows each sentence's sources."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}

# the page loads its own script and style and talks to its own origin; nothing else (no inline script, no frame)
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def read(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


def mount(app: FastAPI) -> None:
    """Serve the page at `/` and its two files at `/page/...` (left out of the OpenAPI schema)."""
    index = read("index.html")
    files = {name: read(name) for name in FILES}

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return Response(index, media_type="text/html; charset=utf-8", headers=HEADERS)

    for name, media_type in FILES.items():
        app.add_api_route(f"/page/{name}", _serve(files[name], media_type), methods=["GET"], include_in_schema=False)


def _serve(content: bytes, media_type: str):
    async def serve() -> Response:
        return Response(content, media_type=media_type, headers=HEADERS)
    return serve
