"""The API's routes, one router per concern."""
