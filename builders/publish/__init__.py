"""Publishing a dataset version: its build report, exports and the Hugging Face Hub."""

from builders.publish.report import gather_report, render_report, write_report

__all__ = ["gather_report", "render_report", "write_report"]
