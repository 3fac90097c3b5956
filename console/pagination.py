from rest_framework.pagination import CursorPagination


class CreatedCursorPagination(CursorPagination):
    """Cursor pagination on (created_at, id): stable under inserts, no COUNT(*)."""

    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = 500
