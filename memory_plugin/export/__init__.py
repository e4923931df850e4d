"""Everything held about a user as one versioned JSON document, and back (docs/export.md).

`export_chunks` streams it from a connection (as the user under RLS, or on the service path);
`import_document` restores it into a database without that user, in one transaction. The JSON Schema of the
format is `schema/v1.json`.
"""

from .format import (
    DERIVED_TABLES,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    SECTIONS,
    TRANSIENT_TABLES,
    ExportDocument,
    parse_document,
)
from .reader import export_chunks
from .service import PoolExporter, export_from_url, import_into_url
from .writer import ImportReport, import_document

__all__ = [
    "DERIVED_TABLES",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "SECTIONS",
    "TRANSIENT_TABLES",
    "ExportDocument",
    "ImportReport",
    "PoolExporter",
    "export_chunks",
    "export_from_url",
    "import_document",
    "import_into_url",
    "parse_document",
]
