// Package quota is the quota service: tenants, clusters, CU and GU quotas,
// Ray WorkGroups and Kueue-style admission. The scheduler will ask it to
// admit and release work.
package quota
