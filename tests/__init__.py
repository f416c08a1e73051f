"""gpumemlab's tests, one folder (room) per package of gpumemlab; shared helpers beside this file."""
