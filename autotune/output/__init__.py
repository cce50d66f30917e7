"""What people read: the terminal (terminal), the HTML report (html), the recipe YAML (recipe) and
the shell / docker formats (launch_formats). May import study and below, never commands."""
