"""From raw records to the figures people read and what they mean: results (`results`), statistics
(`stats`), adaptive repetition (`repeat`), regressions against a baseline (`regression`), change
points in a history (`changepoints`), and a CI pipeline's exit code (`gate`). Pure.
"""
