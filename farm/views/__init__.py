"""Views: pure `render(state)` functions over bench events (`live`), drawn with rich."""
