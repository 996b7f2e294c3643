"""Images attached to thoughts, one package for both sides of the journal.

The adapters store what users paste or upload (:mod:`~coven_codex.attachments.store`: a folder
beside the journal, files named by their content, unsent uploads kept in bounds); the daemon checks
a thought's attachments before it hands them to Codex (:mod:`~coven_codex.attachments.checks`:
inside that folder, an image by its bytes, within ``max_attachment_bytes``).
"""

from coven_codex.attachments.checks import AttachmentRefused, check_images
from coven_codex.attachments.store import (
    MAX_IMAGE_BYTES,
    ImageStore,
    StoredImage,
    UnsentUploads,
    UploadError,
    sniff,
    uploads_dir,
)

__all__ = [
    "MAX_IMAGE_BYTES",
    "AttachmentRefused",
    "ImageStore",
    "StoredImage",
    "UnsentUploads",
    "UploadError",
    "check_images",
    "sniff",
    "uploads_dir",
]
