"""Rendering: plain-text formatting, Markdown and LaTeX tables, and the report's auto-marker rewriting."""
