"""What a board gives off, read: boot timing from its console (`boot`), its output held in bounded
memory (`capture`), its rails' power (`power`). Pure.
"""
