"""Rendering results for people: tables in the seed guides' layout, Markdown, RST, HTML."""
