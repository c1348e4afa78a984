module gpusharepeer

go 1.22
