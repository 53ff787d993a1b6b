"""What every final metric means and which way is better: declared once, never guessed
(torch-free, so that reading results needs no training stack)."""
