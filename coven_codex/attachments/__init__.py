"""Images attached to thoughts, and files Codex sends out, one package for both sides of the journal.

The adapters store what users paste or upload (:mod:`~coven_codex.attachments.store`: a folder
beside the journal, files named by their content, unsent uploads kept in bounds); the daemon checks
a thought's attachments before it hands them to Codex (:mod:`~coven_codex.attachments.checks`:
inside that folder, an image by its bytes, within ``max_attachment_bytes``). Files out
(:mod:`~coven_codex.attachments.files_out`): the built-in spell ``send_file`` copies a file of the
conversation's working directory into that folder and writes a ``file`` entry adapters upload.
"""

from coven_codex.attachments.checks import AttachmentRefused, check_images
from coven_codex.attachments.files_out import (
    FILE_KINDS,
    MAX_FILE_BYTES,
    OUT_FOLDER,
    SENT_NAME,
    FileRefused,
    OutgoingFile,
    ThreadHome,
    ThreadHomes,
    file_spells,
    locate,
    read_checked,
)
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
    "FILE_KINDS",
    "MAX_FILE_BYTES",
    "MAX_IMAGE_BYTES",
    "OUT_FOLDER",
    "SENT_NAME",
    "AttachmentRefused",
    "FileRefused",
    "ImageStore",
    "OutgoingFile",
    "StoredImage",
    "ThreadHome",
    "ThreadHomes",
    "UnsentUploads",
    "UploadError",
    "check_images",
    "file_spells",
    "locate",
    "read_checked",
    "sniff",
    "uploads_dir",
]
