module busbar

go 1.26
