"""Pure wire formats: the data-frame header, control messages, the dtype table.

Nothing here opens a socket; everything is testable on bytes.
"""
