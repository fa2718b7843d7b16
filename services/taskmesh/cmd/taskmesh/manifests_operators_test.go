package main

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The operators' custom resources as far as the manifests use them.
// CloudNativePG's Go module is not served by the module proxy this
// project builds from, and Strimzi publishes no Go types (its API is
// Java), so these structs are written from their CRD schemas
// (postgresql.cnpg.io/v1 Cluster; kafka.strimzi.io/v1beta2 Kafka,
// KafkaNodePool, KafkaTopic, KafkaUser). Each lists only the fields the
// manifests set, with the schemas' names and types: decoded strictly, a
// misspelt or misplaced field fails, and a field the manifests start to
// use must be added here after checking the operator's schema.

type cnpgCluster struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Instances             int    `json:"instances"`
		ImageName             string `json:"imageName"`
		MinSyncReplicas       int    `json:"minSyncReplicas"`
		MaxSyncReplicas       int    `json:"maxSyncReplicas"`
		PrimaryUpdateStrategy string `json:"primaryUpdateStrategy"`
		Bootstrap             struct {
			InitDB struct {
				Database string `json:"database"`
				Owner    string `json:"owner"`
			} `json:"initdb"`
		} `json:"bootstrap"`
		PostgreSQL struct {
			Parameters map[string]string `json:"parameters"`
		} `json:"postgresql"`
		Storage struct {
			Size string `json:"size"`
		} `json:"storage"`
		Resources  corev1.ResourceRequirements `json:"resources"`
		Monitoring struct {
			EnablePodMonitor bool `json:"enablePodMonitor"`
		} `json:"monitoring"`
	} `json:"spec"`
}

type strimziKafka struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Kafka struct {
			Version   string `json:"version"`
			Listeners []struct {
				Name           string `json:"name"`
				Port           int    `json:"port"`
				Type           string `json:"type"`
				TLS            bool   `json:"tls"`
				Authentication *struct {
					Type string `json:"type"`
				} `json:"authentication"`
				NetworkPolicyPeers []networkingv1.NetworkPolicyPeer `json:"networkPolicyPeers"`
			} `json:"listeners"`
			Config map[string]any `json:"config"`
		} `json:"kafka"`
		EntityOperator *struct {
			TopicOperator *struct{} `json:"topicOperator"`
			UserOperator  *struct{} `json:"userOperator"`
		} `json:"entityOperator"`
	} `json:"spec"`
}

type strimziNodePool struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Replicas int      `json:"replicas"`
		Roles    []string `json:"roles"`
		Storage  struct {
			Type        string `json:"type"`
			Size        string `json:"size"`
			DeleteClaim bool   `json:"deleteClaim"`
		} `json:"storage"`
		Resources corev1.ResourceRequirements `json:"resources"`
	} `json:"spec"`
}

type strimziTopic struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Partitions int            `json:"partitions"`
		Replicas   int            `json:"replicas"`
		Config     map[string]any `json:"config"`
	} `json:"spec"`
}

type strimziUser struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Authentication struct {
			Type string `json:"type"`
		} `json:"authentication"`
	} `json:"spec"`
}
