"""Publishing a dataset version: its build report, exports and the Hugging Face Hub."""

from builders.publish.export import FORMATS, ExportError, export_dataset
from builders.publish.hub import PushError, push_dataset
from builders.publish.manifest_file import ManifestMismatchError, find_manifest
from builders.publish.report import gather_report, render_report, write_report

__all__ = [
    "FORMATS",
    "ExportError",
    "ManifestMismatchError",
    "PushError",
    "export_dataset",
    "find_manifest",
    "gather_report",
    "push_dataset",
    "render_report",
    "write_report",
]
