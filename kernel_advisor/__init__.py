"""kernel_advisor: is a custom kernel worth it, and what should you do instead?"""

__version__ = "0.1.0"
